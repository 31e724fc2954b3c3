"""Dynamic batching: concurrent requests queue up and run together, so throughput grows with concurrency.

One worker task takes the queued requests in arrival order, up to ``max_batch`` rows (a request with more rows
runs alone), waiting at most ``max_wait_ms`` after the oldest of them arrived for more to join, and runs them in
one call of ``run`` in a worker thread (the event loop keeps accepting requests meanwhile). ``run`` sorts the rows
by length and cuts them into batches of ``max_batch`` (:meth:`attnpool.serving.service.Service.run`), so one call
is one forward pass per model when the rows fit in one batch.

The queue is bounded (``max_queue_rows``): past it :meth:`Batcher.submit` raises :class:`Busy`, which the server
answers with 503 instead of letting latency grow without bound. ``max_batch=1, max_wait_ms=0`` turns batching
off: one request (of one row) per forward pass. A request cancelled while it waits (its client left) leaves the
queue at once; one cancelled while its batch runs gets no result.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

logger = logging.getLogger("attnpool.serve")

NOT_STARTED = ("the app's lifespan did not start it; serve the app as the top-level ASGI app (uvicorn, or "
               "`with TestClient(app)` in tests), not mounted inside another app whose lifespan does not run it")


class Busy(RuntimeError):
    """The queue is full: the request was not queued (answer 503, retry later)."""


class NotRunning(RuntimeError):
    """The worker is not running (never started, or stopped on an error): the request was not queued (answer 503)."""


@dataclass(eq=False)  # compared by identity (a payload's arrays have no truth value)
class _Pending:
    payload: Any
    rows: int
    future: asyncio.Future
    arrived: float  # loop time


class Batcher:
    """The queue and its one worker; :meth:`start` and :meth:`stop` from the event loop that serves.

    Args:
        run: ``run(payloads) -> results``, one result per payload, called in a worker thread.
        max_batch: Rows per call, at most (a single larger request runs alone).
        max_wait_ms: How long the oldest queued request waits for others to join it.
        max_queue_rows: Rows that may wait at once; more raise :class:`Busy`.
        on_batch: Called with ``(rows, requests)`` of every call that succeeded, from the event loop (after the
            requests got their results).
    """

    def __init__(self, run: Callable[[Sequence[Any]], Sequence[Any]], *, max_batch: int, max_wait_ms: float,
                 max_queue_rows: int, on_batch: Callable[[int, int], object] | None = None) -> None:
        if max_batch < 1 or not 0 <= max_wait_ms < math.inf or max_queue_rows < 1:  # NaN fails too
            raise ValueError(f"need max_batch >= 1, a finite max_wait_ms >= 0 and max_queue_rows >= 1, got "
                             f"{max_batch}, {max_wait_ms} and {max_queue_rows}")
        self.run, self.max_batch, self.max_wait = run, max_batch, max_wait_ms / 1000
        self.max_queue_rows, self.on_batch = max_queue_rows, on_batch
        self._queue: collections.deque[_Pending] = collections.deque()
        self._rows = 0  # rows queued
        self._arrived: asyncio.Event | None = None
        self._worker: asyncio.Task | None = None
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._flushing = self._stopping = False

    @property
    def running(self) -> bool:
        """Whether the worker is taking requests (it may be draining: see :meth:`stop`)."""
        return self._worker is not None and not self._worker.done()

    @property
    def not_running(self) -> str | None:
        """Why the worker is not running, in words; ``None`` while it runs."""
        if self.running:
            return None
        if self._worker is None:
            return f"the batcher is not running: {NOT_STARTED}"
        if self._worker.cancelled():
            return "the batcher is not running: its worker was cancelled; restart the server"
        if self._worker.exception() is not None:
            return (f"the batcher is not running: its worker stopped on {type(self._worker.exception()).__name__} "
                    "(the server's log has the traceback); restart the server")
        return "the batcher is not running: it was stopped (the app's lifespan ended)"

    @property
    def queued_rows(self) -> int:
        """Rows waiting (not yet running)."""
        return self._rows

    @property
    def queued_requests(self) -> int:
        """Requests waiting (not yet running)."""
        return len(self._queue)

    async def start(self) -> None:
        """Start the worker on the running loop (again after :meth:`stop`: an app's lifespan may run twice)."""
        self._flushing = self._stopping = False
        self._arrived = asyncio.Event()
        self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="attnpool-batch")
        self._worker = asyncio.get_running_loop().create_task(self._work(), name="attnpool-batcher")
        self._worker.add_done_callback(self._ended)

    async def submit(self, payload: Any, rows: int) -> Any:
        """Queue a request of ``rows`` rows and wait for its result.

        Raises:
            Busy: The queue is full, or the batcher is stopping.
            NotRunning: The worker is not running: never started, or stopped on an error.
            Exception: Whatever ``run`` raised for this request.
        """
        if self._stopping:
            raise Busy("the server is shutting down")
        if self._arrived is None or not self.running:
            raise NotRunning(self.not_running or "the batcher is not running")
        if self._rows and self._rows + rows > self.max_queue_rows:
            raise Busy(f"{self._rows} rows are waiting already (at most {self.max_queue_rows})")
        loop = asyncio.get_running_loop()
        pending = _Pending(payload, rows, loop.create_future(), loop.time())
        self._queue.append(pending)
        self._rows += rows
        self._arrived.set()
        try:
            return await pending.future
        except asyncio.CancelledError:  # its client left (see attnpool.serving.app.unless_client_leaves)
            self._withdraw(pending)
            raise

    def flush(self) -> None:
        """Stop waiting for requests to join: run what is queued at once (when draining)."""
        self._flushing = True
        if self._arrived is not None:
            self._arrived.set()

    async def stop(self) -> None:
        """Run what is queued, then stop the worker and its thread."""
        self._stopping = True
        self.flush()
        if self._worker is not None:
            await asyncio.wait({self._worker})  # one that died on an error has logged it (see _ended): not again
        if self._executor is not None:
            self._executor.shutdown(wait=True)

    async def _work(self) -> None:
        while True:
            batch: list[_Pending] = []
            try:
                if not await self._gather():
                    return
                batch = self._take()
                if batch:
                    await self._serve(batch)
            except Exception as err:  # noqa: BLE001 - a bug of the worker fails its batch, never the next requests
                logger.exception("attnpool serve: the batcher failed on a batch of %d request(s)", len(batch))
                self._fail(batch, err)

    async def _gather(self) -> bool:
        """Wait for a request, then for others to join it; ``False`` when stopping with nothing queued."""
        loop = asyncio.get_running_loop()
        assert self._arrived is not None  # set by start, before the worker
        while not self._queue:
            if self._stopping:
                return False
            self._arrived.clear()
            await self._arrived.wait()
        deadline = self._queue[0].arrived + self.max_wait
        while self._rows < self.max_batch and not self._flushing:
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            self._arrived.clear()
            try:
                await asyncio.wait_for(self._arrived.wait(), remaining)
            except asyncio.TimeoutError:
                break
        return True

    async def _serve(self, batch: list[_Pending]) -> None:
        """Run a batch and hand out its results; a batch of several that fails runs again one request at a time."""
        loop = asyncio.get_running_loop()
        try:
            results = await loop.run_in_executor(self._executor, self.run, [p.payload for p in batch])
        except Exception as err:  # noqa: BLE001 - the requests get the error; the worker goes on
            if len(batch) == 1:
                self._fail(batch, err)
                return
            # One request's failure (a text the model cannot take) must not fail the requests batched with it:
            # alone, each gets its own answer or its own error.
            for p in batch:
                if not p.future.done():
                    await self._serve([p])
            return
        if len(results) != len(batch):
            raise RuntimeError(f"the model runner returned {len(results)} results for {len(batch)} requests")
        for p, result in zip(batch, results, strict=True):
            if not p.future.done():  # a request cancelled meanwhile (its client left) takes no result
                p.future.set_result(result)
        if self.on_batch is not None:  # rows predicted: a failed call is counted as the requests' errors
            self.on_batch(sum(p.rows for p in batch), len(batch))

    @staticmethod
    def _fail(batch: Sequence[_Pending], err: BaseException) -> None:
        for p in batch:
            if not p.future.done():
                p.future.set_exception(err)

    def _ended(self, worker: asyncio.Task) -> None:
        """The worker stopped: fail what still waits (nothing, after :meth:`stop`), so that no request hangs."""
        if not worker.cancelled() and worker.exception() is not None:
            logger.error("attnpool serve: the batcher stopped", exc_info=worker.exception())
        waiting = list(self._queue)
        self._queue.clear()
        self._rows = 0
        self._fail(waiting, NotRunning(self.not_running or "the batcher is not running"))

    def _withdraw(self, pending: _Pending) -> None:
        """Take a cancelled request out of the queue (and the queue's gauges) if it waits still."""
        if pending in self._queue:
            self._queue.remove(pending)
            self._rows -= pending.rows

    def _take(self) -> list[_Pending]:
        """The oldest requests that fit in ``max_batch`` rows (at least one), skipping cancelled ones."""
        batch: list[_Pending] = []
        rows = 0
        while self._queue and (not batch or rows + self._queue[0].rows <= self.max_batch):
            pending = self._queue.popleft()
            self._rows -= pending.rows
            if pending.future.cancelled():
                continue
            batch.append(pending)
            rows += pending.rows
        return batch
