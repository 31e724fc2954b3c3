"""The dynamic batching queue, with a stand-in model: batch limits, waiting, a bounded queue, errors, draining."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from attnpool.serving.batcher import Batcher, Busy


def serve(run, coroutine, **options):
    """Start a batcher around ``run``, await ``coroutine(batcher)``, stop it; the result."""
    async def main():
        batcher = Batcher(run, **{"max_batch": 4, "max_wait_ms": 50, "max_queue_rows": 100, **options})
        await batcher.start()
        try:
            return await coroutine(batcher)
        finally:
            await batcher.stop()
    return asyncio.run(main())


class Model:
    def __init__(self, fail_on=None, gate: threading.Event | None = None):
        self.calls, self.fail_on, self.gate = [], fail_on, gate

    def __call__(self, payloads):
        if self.gate is not None:
            self.gate.wait(10)
        self.calls.append(list(payloads))
        if self.fail_on in payloads:
            raise RuntimeError("model failed")
        return [f"answer {p}" for p in payloads]


def test_requests_arriving_together_run_together_up_to_max_batch():
    model = Model()
    results = serve(model, lambda b: asyncio.gather(*(b.submit(i, 1) for i in range(6))))
    assert results == [f"answer {i}" for i in range(6)]
    assert model.calls == [[0, 1, 2, 3], [4, 5]]


def test_rows_count_and_a_request_larger_than_max_batch_runs_alone():
    model = Model()
    serve(model, lambda b: asyncio.gather(b.submit("a", 3), b.submit("b", 10), b.submit("c", 2), b.submit("d", 2)))
    assert model.calls == [["a"], ["b"], ["c", "d"]]


def test_a_lone_request_waits_at_most_max_wait_ms():
    async def timed(batcher):
        start = time.perf_counter()
        await batcher.submit("x", 1)
        return time.perf_counter() - start

    assert serve(Model(), timed, max_wait_ms=0) < 0.05
    assert 0.1 <= serve(Model(), timed, max_wait_ms=100) < 1.0


def test_a_full_batch_does_not_wait():
    async def timed(batcher):
        start = time.perf_counter()
        await asyncio.gather(*(batcher.submit(i, 1) for i in range(4)))
        return time.perf_counter() - start

    assert serve(Model(), timed, max_wait_ms=5000) < 1.0


def test_a_full_queue_answers_busy():
    gate = threading.Event()
    model = Model(gate=gate)

    async def flood(batcher):
        first = asyncio.ensure_future(batcher.submit("running", 4))
        await asyncio.sleep(0.05)  # taken by the worker, blocked in the model
        queued = asyncio.ensure_future(batcher.submit("queued", 3))
        await asyncio.sleep(0)
        with pytest.raises(Busy, match="3 rows are waiting already"):
            await batcher.submit("refused", 1)
        assert batcher.queued_rows == 3 and batcher.queued_requests == 1
        gate.set()
        return await asyncio.gather(first, queued)

    assert serve(model, flood, max_queue_rows=3, max_wait_ms=0) == ["answer running", "answer queued"]


def test_an_error_reaches_only_its_request_and_the_worker_goes_on():
    """A batch that fails runs again one request at a time: the request batched with the bad one is answered."""
    model = Model(fail_on="bad")

    async def mixed(batcher):
        together = await asyncio.gather(batcher.submit("bad", 1), batcher.submit("same batch", 1),
                                        return_exceptions=True)
        return together, await batcher.submit("later", 1)

    counted = []
    (bad, same), later = serve(model, mixed, on_batch=lambda rows, requests: counted.append((rows, requests)))
    assert isinstance(bad, RuntimeError) and same == "answer same batch" and later == "answer later"
    assert model.calls == [["bad", "same batch"], ["bad"], ["same batch"], ["later"]]
    assert counted == [(1, 1), (1, 1)], "rows predicted: the failed request's rows are not among them"


def test_a_failing_on_batch_loses_no_answer_and_stops_no_worker(caplog):
    """The worker died with an error of its metrics callback: every request after it waited forever."""
    def broken(rows, requests):
        raise ValueError("metrics failed")

    async def twice(batcher):
        return [await asyncio.wait_for(batcher.submit(name, 1), 5) for name in ("first", "second")]

    assert serve(Model(), twice, on_batch=broken, max_wait_ms=0) == ["answer first", "answer second"]
    assert "metrics failed" in caplog.text


def test_a_runner_answering_the_wrong_number_of_results_fails_its_batch_only():
    """``zip(strict=True)`` raised inside the worker: it died, and the batch and every later request hung."""
    def short(payloads):
        return ["one answer"] if len(payloads) > 1 else [f"answer {p}" for p in payloads]

    async def requests(batcher):
        together = await asyncio.wait_for(asyncio.gather(batcher.submit("a", 1), batcher.submit("b", 1),
                                                         return_exceptions=True), 5)
        return together, await asyncio.wait_for(batcher.submit("later", 1), 5)

    together, later = serve(short, requests)
    assert [str(e) for e in together] == ["the model runner returned 1 results for 2 requests"] * 2
    assert later == "answer later"


def test_a_worker_that_died_fails_the_waiting_requests_and_refuses_new_ones():
    async def cancelled(batcher):
        waiting = asyncio.ensure_future(batcher.submit("queued", 1))
        await asyncio.sleep(0.01)
        batcher._worker.cancel()  # what no error of a batch can do any more: the worker stops all the same
        with pytest.raises(RuntimeError, match="the batcher is not running: its worker was cancelled") as refused:
            await asyncio.wait_for(waiting, 5)
        assert type(refused.value).__name__ == "NotRunning" and not batcher.running
        with pytest.raises(RuntimeError, match="the batcher is not running: its worker was cancelled"):
            await batcher.submit("later", 1)
        return batcher.queued_rows, batcher.queued_requests

    assert serve(Model(), cancelled, max_wait_ms=10_000) == (0, 0)


def test_a_batcher_never_started_refuses_requests_and_says_why():
    async def unstarted():
        batcher = Batcher(Model(), max_batch=4, max_wait_ms=0, max_queue_rows=100)
        assert not batcher.running and "the app's lifespan did not start it" in batcher.not_running
        await batcher.submit("x", 1)

    with pytest.raises(RuntimeError, match="the batcher is not running: the app's lifespan did not start it"):
        asyncio.run(unstarted())


def test_stopping_runs_what_is_queued_at_once():
    model = Model()

    async def drain(batcher):
        pending = [asyncio.ensure_future(batcher.submit(i, 1)) for i in range(2)]
        await asyncio.sleep(0.01)
        start = time.perf_counter()
        await batcher.stop()
        with pytest.raises(Busy):
            await batcher.submit("late", 1)
        return await asyncio.gather(*pending), time.perf_counter() - start

    results, seconds = serve(model, drain, max_wait_ms=10_000)
    assert results == ["answer 0", "answer 1"] and seconds < 2


def test_options_are_checked():
    with pytest.raises(ValueError, match="max_batch >= 1"):
        Batcher(Model(), max_batch=0, max_wait_ms=1, max_queue_rows=1)


def test_a_batcher_stopped_and_started_again_serves_again():
    """An app's lifespan may run twice (tests, an embedding app): the second start must not refuse as draining."""
    model = Model()

    async def twice():
        batcher = Batcher(model, max_batch=4, max_wait_ms=0, max_queue_rows=100)
        answers = []
        for _ in range(2):
            await batcher.start()
            answers.append(await batcher.submit("x", rows=1))
            await batcher.stop()
        return answers

    assert asyncio.run(twice()) == ["answer x", "answer x"]


@pytest.mark.parametrize("wait", [float("inf"), float("nan"), -1.0])
def test_a_wait_that_is_not_a_finite_number_of_milliseconds_is_refused(wait):
    with pytest.raises(ValueError, match="need max_batch >= 1, a finite max_wait_ms >= 0"):
        Batcher(Model(), max_batch=4, max_wait_ms=wait, max_queue_rows=100)
