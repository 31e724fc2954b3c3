"""Start-up refuses what it cannot serve (nothing listens), SIGTERM drains, and ``attnpool`` imports without FastAPI."""

from __future__ import annotations

import errno
import importlib
import inspect
import os
import re
import shutil
import signal
import socket
import sys
import threading
import time

import pytest
from serve_helpers import metric, request, wait_until

import attnpool
from attnpool import cli
from attnpool.serving import server as server_module


@pytest.fixture
def never_listen(monkeypatch):
    """A start-up that gets as far as opening the port fails the test instead of serving forever."""
    def refuse(host, port):
        raise AssertionError("the server started listening")
    monkeypatch.setattr(server_module, "listen", refuse)


def serve_cli(capsys, *args):
    code = cli.main(["serve", *args, "--port", "0", "--device", "cpu"])
    return code, capsys.readouterr().err


def test_a_fold_model_that_fails_to_load_stops_the_start_up(recipe, tmp_path, capsys, never_listen):
    broken = tmp_path / "run"
    shutil.copytree(recipe["run"], broken)
    (broken / "fold_1" / "model" / "model.safetensors").write_bytes(b"not a checkpoint")
    code, err = serve_cli(capsys, "--run", str(broken))
    assert code == 2 and "cannot load the fold model in" in err and "fold_1" in err and "ready on" not in err


@pytest.mark.parametrize(("args", "message"), [
    (["--folds", "5"], "has no trained fold 5; trained folds: 0, 1"),
    (["--api-key-env", "ATTNPOOL_SURELY_UNSET"], "the environment variable ATTNPOOL_SURELY_UNSET is not set"),
    (["--max-batch", "0"], "max_batch must be an integer >= 1"),
    (["--max-wait-ms", "inf"], "max_wait_ms must be a finite number >= 0, got inf"),
    (["--max-length", "32"], "--max-length is for a model folder"),
])
def test_bad_options_stop_the_start_up(recipe, capsys, never_listen, args, message):
    code, err = serve_cli(capsys, "--run", str(recipe["run"]), *args)
    assert code == 2 and message in err


@pytest.mark.parametrize(("max_length", "message"), [
    ("-3", "--max-length must be an integer >= 1 (tokens per row), got -3"),
    ("100", "--max-length 100 is over what the encoder of"),
])
def test_a_model_folder_max_length_that_cannot_serve_stops_the_start_up(classifier, capsys, never_listen, max_length,
                                                                       message):
    code, err = serve_cli(capsys, "--run", str(classifier), "--max-length", max_length)
    assert code == 2 and message in err and "Traceback" not in err


def test_a_folder_that_is_neither_a_run_nor_a_model(tmp_path, capsys, never_listen):
    code, err = serve_cli(capsys, "--run", str(tmp_path))
    assert code == 2 and "neither a train run directory nor a saved model folder" in err


def test_a_port_in_use_is_a_clear_error(recipe, capsys):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code = cli.main(["serve", "--run", str(recipe["run"]), "--port", str(port), "--device", "cpu"])
    err = capsys.readouterr().err
    assert code == 2 and f"cannot listen on 127.0.0.1:{port}" in err
    assert "; choose another --port (0: any free one), or stop what listens there" in err


@pytest.mark.parametrize("host", ["::", "[::]"])
def test_listening_on_the_ipv6_any_address_takes_ipv4_too(host):
    """uvicorn --host :: takes IPv4 connections; socket.create_server made "::" IPv6-only."""
    if not socket.has_ipv6 or not socket.has_dualstack_ipv6():
        pytest.skip("no dual-stack IPv6 here")
    try:
        listening = server_module.listen(host, 0)
    except OSError as err:
        pytest.skip(f"cannot listen on IPv6 here: {err}")
    with listening, socket.create_connection(("127.0.0.1", listening.getsockname()[1]), timeout=10):
        listening.settimeout(10)
        accepted, (address, *_) = listening.accept()
        accepted.close()
    assert address == "::ffff:127.0.0.1"


def test_a_failure_after_listening_closes_the_port(recipe, monkeypatch):
    """serve() called from Python goes on running after an error: the port it opened must not stay bound."""
    opened = []

    def listen(host, port):
        opened.append(server_module.socket.create_server((host, port)))
        return opened[-1]

    def broken_server(config):
        raise RuntimeError("uvicorn could not start")

    monkeypatch.setattr(server_module, "listen", listen)
    monkeypatch.setattr(server_module.web.uvicorn, "Server", broken_server)
    with pytest.raises(RuntimeError, match="uvicorn could not start"):
        attnpool.serve(recipe["run"], port=0, device="cpu")
    assert len(opened) == 1 and opened[0].fileno() == -1, "the listening socket was left open"


def test_the_cli_defaults_are_the_api_defaults():
    parser = cli.build_parser()
    args = parser.parse_args(["serve", "--run", "r"])
    defaults = {k: p.default for k, p in inspect.signature(attnpool.serve).parameters.items()
                if p.default is not p.empty}
    for name in ("host", "port", "ensemble", "max_batch", "max_wait_ms", "max_rows", "max_body_bytes", "precision"):
        assert getattr(args, name) == defaults[name], name
    assert defaults["host"] == "127.0.0.1" and args.api_key_env is None and args.cors_origins is None


def test_sigterm_drains_the_requests_in_flight_then_exits_cleanly(draining_server):
    served = draining_server
    port = served.port
    answer: list = []
    client = threading.Thread(target=lambda: answer.append(request(port, "POST", "/predict", {
        "rows": [{"first": "the cat", "second": "a dog"}]})))
    client.start()
    assert wait_until(lambda: metric(request(port, "GET", "/metrics")[2], "attnpool_queue_requests") == 1)
    signalled = time.monotonic()
    served.process.send_signal(signal.SIGTERM)
    client.join(30)
    assert answer and answer[0][0] == 200, answer
    assert time.monotonic() - signalled < 4, "the queued request was not run at once on SIGTERM"
    assert served.process.wait(30) == 0, served.output
    served.stop()
    assert "stopped after" in served.output and "Traceback" not in served.output
    with pytest.raises(ConnectionRefusedError):
        request(port, "GET", "/health", timeout=5)


def test_the_serving_package_imports_without_the_serve_extra(monkeypatch, capsys):
    """``attnpool.api`` imports ``attnpool.serving`` at its top: that import must work without FastAPI."""
    monkeypatch.setattr(attnpool, "serving", attnpool.serving)  # the fresh import below replaces the attribute
    for name in [n for n in sys.modules if n == "attnpool.serving" or n.startswith("attnpool.serving.")]:
        monkeypatch.delitem(sys.modules, name)
    for name in ("fastapi", "uvicorn"):
        monkeypatch.setitem(sys.modules, name, None)  # as if not installed
    fresh = importlib.import_module("attnpool.serving")
    assert fresh.web.MISSING is not None and fresh.web.FastAPI is None and fresh.Service is not None
    with pytest.raises(ImportError, match=re.escape("attnpool serve needs FastAPI and uvicorn: pip install "
                                                    "'attnpool[serve]'")):
        fresh.serve("somewhere")
    monkeypatch.setattr(cli.api, "serve", fresh.serve)
    assert cli.main(["serve", "--run", "somewhere"]) == 2
    assert "error: attnpool serve needs FastAPI and uvicorn: pip install 'attnpool[serve]'" in capsys.readouterr().err


@pytest.mark.parametrize(("code", "advice"), [
    (errno.EADDRINUSE, "; choose another --port (0: any free one), or stop what listens there"),
    (errno.EADDRNOTAVAIL, "; check --host: an address of this machine, or 0.0.0.0 for all"),
    (errno.EACCES, "; a port below 1024 needs privileges: choose another --port"),
])
def test_a_listen_error_gets_the_advice_of_its_cause(monkeypatch, code, advice):
    """Every bind error was told to choose another port, a wrong --host too."""
    def refuse(*args, **kwargs):
        raise OSError(code, os.strerror(code))
    monkeypatch.setattr(server_module.socket, "create_server", refuse)
    with pytest.raises(OSError) as caught:
        server_module.listen("127.0.0.1", 80)
    assert str(caught.value) == f"cannot listen on 127.0.0.1:80: {os.strerror(code)}{advice}"
