"""--report-to mlflow's experiment checked before the run folder; train.log keeps every warning and what ended a run.

Also the nested MLflow folds' experiment (the caller's run's) and report_to given as a list in a config file.
"""

from __future__ import annotations

import logging
import warnings

import pytest
import transformers

import attnpool
from attnpool.config import TrainConfig
from attnpool.options import ConfigError
from attnpool.runs import Run
from attnpool.training import console_logging, trackers, tracking
from model_helpers import make_run, save_tiny_encoder, write_toy_csv


@pytest.fixture
def recipe(tmp_path):
    encoder = save_tiny_encoder(tmp_path / "encoder")
    write_toy_csv(tmp_path / "train.csv", n=24, seed=0)
    return {"train_file": str(tmp_path / "train.csv"), "text_cols": ["first", "second"], "model": encoder,
            "folds": 2, "epochs": 1, "max_length": 16, "batch_size": 4, "precision": "fp32"}


def test_a_deleted_mlflow_experiment_is_refused_before_overwrite_empties_the_old_run(recipe, tmp_path, mlflow_store):
    """The run's experiment deleted in the UI: fold 0 failed on it, the old run already emptied by --overwrite."""
    mlflow, client = mlflow_store
    old = make_run(tmp_path / "run", recipe["model"])
    kept = sorted(p.relative_to(old) for p in old.rglob("*"))
    client.delete_experiment(client.create_experiment(old.resolve().as_posix()))
    with pytest.raises(ValueError, match=r"^--report-to mlflow: the MLflow experiment '.*/run' \(id \d+\) at file://"
                                         r".* is deleted, .*restore it .*mlflow gc --experiment-ids \d+.*"
                                         r"set MLFLOW_EXPERIMENT_NAME to another experiment$"):
        attnpool.train(recipe, output_dir=str(old), overwrite=True, report_to="mlflow")
    assert sorted(p.relative_to(old) for p in old.rglob("*")) == kept


def test_report_to_all_leaves_a_deleted_experiment_out_of_every_fold_and_a_resume_refuses_it(recipe, tmp_path,
                                                                                              mlflow_store):
    """`all` warned that MLflow was left out, then the folds asked again without the experiment and fold 0 failed on
    it; a resume whose saved config names mlflow trained into fold 1 and died on the deleted experiment."""
    mlflow, client = mlflow_store
    out = tmp_path / "all"
    client.delete_experiment(client.create_experiment(out.resolve().as_posix()))
    result = attnpool.train(recipe, output_dir=str(out), report_to="all", only_folds=[0])
    assert not result.complete and (out / "fold_0").is_dir()
    assert client.search_runs([e.experiment_id for e in client.search_experiments()]) == []
    saved = tmp_path / "saved"
    attnpool.train(recipe, output_dir=str(saved), report_to="mlflow", only_folds=[0])
    client.delete_experiment(client.get_experiment_by_name(saved.resolve().as_posix()).experiment_id)
    with pytest.raises(ValueError, match=r"report_to: mlflow.*is deleted"):
        attnpool.train(output_dir=str(saved), resume=True)
    assert not (saved / "fold_1").exists()


def test_an_mlflow_experiment_id_that_names_no_experiment_is_refused_before_the_run_folder(recipe, tmp_path,
                                                                                          mlflow_store, monkeypatch):
    monkeypatch.setenv("MLFLOW_EXPERIMENT_ID", "424242")
    with pytest.raises(ValueError, match=r"^--report-to mlflow: MLFLOW_EXPERIMENT_ID=424242 names no experiment at "
                                         r"file://.*; set it to the id of an existing experiment, or unset it"):
        attnpool.train(recipe, output_dir=str(tmp_path / "run"), report_to="mlflow")
    assert not (tmp_path / "run").exists()


def test_a_tracking_server_out_of_reach_is_one_line_naming_mlflow_tracking_uri(mlflow_store, monkeypatch):
    mlflow, _ = mlflow_store
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:9")  # the discard port: refused at once
    monkeypatch.setattr(mlflow.tracking._tracking_service.utils, "_tracking_uri", None)
    with pytest.raises(ValueError) as caught:
        tracking.integrations("mlflow", experiment="/somewhere/run")
    message = str(caught.value)
    assert message.startswith("--report-to mlflow: MLflow cannot reach its tracking store http://127.0.0.1:9 (")
    assert message.endswith("start the server, or set MLFLOW_TRACKING_URI to one that answers")
    assert "\n" not in message and caught.value.__cause__ is None


def test_the_experiment_is_only_looked_up_where_asked(mlflow_store):
    """Every fold asks integrations() again: without ``experiment`` nothing is looked up, and a new one is fine."""
    assert tracking.integrations("mlflow") == ["mlflow"]
    assert trackers.mlflow_experiment_error("/not/made/yet") is None


class _WarnThenFail(transformers.TrainerCallback):
    def on_train_begin(self, args, state, control, **kwargs):
        warnings.warn("CALLBACK-WARNING", UserWarning, stacklevel=1)
        raise RuntimeError("BOOM in fold 0")


@pytest.mark.filterwarnings("default::UserWarning")
def test_train_log_keeps_the_early_warnings_the_python_warnings_and_the_error_that_ended_the_run(
        recipe, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(trackers, "_LEFT_OUT", set())
    monkeypatch.setattr(trackers, "mlflow_store_error", lambda: "MLflow cannot open its tracking store sqlite:///x")
    for name in tracking.TRACKERS:
        monkeypatch.setitem(tracking._INSTALLED, name, lambda name=name: name == "mlflow")
    with pytest.raises(RuntimeError, match="BOOM in fold 0"):
        attnpool.train(recipe, output_dir=str(tmp_path / "run"), report_to="all", callbacks=[_WarnThenFail()])
    log = (tmp_path / "run" / "train.log").read_text()
    assert "WARNING attnpool.train: tracking: --report-to all leaves out mlflow: MLflow cannot open" in log
    assert "UserWarning: CALLBACK-WARNING" in log
    last = log[log.index("ERROR attnpool.train: the run stopped on an error"):].splitlines()
    assert last[0].endswith("ERROR attnpool.train: the run stopped on an error: RuntimeError: BOOM in fold 0")
    assert last[1] == "Traceback (most recent call last):" and last[-1] == "RuntimeError: BOOM in fold 0"
    assert "the run stopped" not in capsys.readouterr().err  # the caller (the CLI) says it, once


def test_an_interrupt_is_the_last_record_of_train_log(tmp_path):
    from attnpool.training.run_log import attach_log_file, log_ending

    run = Run.create(tmp_path / "my run")
    handler = attach_log_file(run.log_file)
    try:
        log_ending(handler, KeyboardInterrupt(), run.path)  # before the run info: --resume is refused
        run.write_info({"task": "regression"})
        log_ending(handler, KeyboardInterrupt(), run.path)
    finally:
        logging.getLogger("attnpool").removeHandler(handler)
        handler.close()
    last = run.log_file.read_text().rstrip().splitlines()[-2:]  # as the command line says it (cli._resume_hint)
    assert last[0].endswith("ERROR attnpool.train: interrupted (KeyboardInterrupt): the run stopped here; start it "
                            "again (without --resume): it stopped before its run was recorded")
    assert last[1].endswith("ERROR attnpool.train: interrupted (KeyboardInterrupt): the run stopped here; to continue "
                            f"from its last checkpoint: attnpool train ... --output-dir '{run.path}' --resume")


@pytest.mark.filterwarnings("default::UserWarning")
@pytest.mark.parametrize("verbosity", ["normal", "verbose"])  # at verbose they reached the console only
def test_a_warning_shown_on_the_console_during_a_run_is_in_train_log_too(tmp_path, capsys, verbosity):
    handler = logging.FileHandler(tmp_path / "train.log", encoding="utf-8")
    before = console_logging.get_verbosity()
    console_logging.set_verbosity(verbosity)
    try:
        with console_logging.quiet_third_party(handler):
            warnings.warn("SHOWN-AND-LOGGED", UserWarning, stacklevel=1)
    finally:
        console_logging.set_verbosity(before)
        handler.close()
    assert "UserWarning: SHOWN-AND-LOGGED" in capsys.readouterr().err
    assert "UserWarning: SHOWN-AND-LOGGED" in (tmp_path / "train.log").read_text()


def test_mlflow_folds_nested_in_the_callers_run_use_its_experiment_and_so_does_the_cv_entry(recipe, tmp_path,
                                                                                           mlflow_store):
    mlflow, client = mlflow_store
    outer_experiment = client.create_experiment("mine")
    with mlflow.start_run(run_name="outer", experiment_id=outer_experiment) as outer:
        attnpool.train(recipe, output_dir=str(tmp_path / "run"), report_to="mlflow")
    name = (tmp_path / "run").resolve().as_posix()
    assert client.get_experiment_by_name(name) is None, "no experiment of the run folder's own"
    runs = {r.info.run_name: r for r in client.search_runs([outer_experiment])}
    assert set(runs) == {"outer", f"{name}/fold_0", f"{name}/fold_1", f"{name}/cv"}
    assert {r.data.tags.get("mlflow.parentRunId") for n, r in runs.items() if n != "outer"} == {outer.info.run_id}
    assert Run.open(tmp_path / "run").metrics()["complete"]


def test_report_to_as_a_list_in_a_config_file_says_it_takes_one_tracker_or_all(tmp_path):
    (tmp_path / "c.yaml").write_text("report_to: [tensorboard, mlflow]\n")
    with pytest.raises(ConfigError) as caught:
        TrainConfig.from_dict(attnpool.config.load_yaml(tmp_path / "c.yaml"), where="c.yaml")
    assert str(caught.value) == ("c.yaml: report_to must be text, got ['tensorboard', 'mlflow']; report_to takes one "
                                 "tracker (none, tensorboard, mlflow or wandb), or all for every installed one: "
                                 "report_to: all")


def test_the_trackers_are_decided_once_per_run_and_each_run_warns_in_its_own_train_log(recipe, tmp_path,
                                                                                         monkeypatch):
    """--report-to all looked MLflow up again at every fold (twice) and for the cv entry; the warning that it was
    left out came once per process, so a second run in the process had none in its train.log."""
    lookups = []
    monkeypatch.setattr(trackers, "_LEFT_OUT", set())
    monkeypatch.setattr(trackers, "mlflow_store_error", lambda: lookups.append(1) or "MLflow store shut (test)")
    for name in tracking.TRACKERS:
        monkeypatch.setitem(tracking._INSTALLED, name, lambda name=name: name == "mlflow")
    for run in ("first", "second"):
        attnpool.train(recipe, output_dir=str(tmp_path / run), report_to="all")
        log = (tmp_path / run / "train.log").read_text()
        assert log.count("tracking: --report-to all leaves out mlflow: MLflow store shut (test)") == 1, run
    assert len(lookups) == 2  # per run: once, before its folder is made
