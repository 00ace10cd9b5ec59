"""Publishing what the images of running segments decided, many images at a time.

Every lane of every segment hands its image's Notify message and verdict here and goes on
with its next scanner call. What was handed over in one turn of the event loop is published
together: the Notify messages first, then — for each image whose message was stored — its
verdict, so the verdict's presence on the log still proves the message was stored (a crash in
between re-sends the message with the same id; JetStream and Notify drop the copy). A
segment waits for all of its images here (:meth:`Tally.settled`) before it records its
``segment.completed``: a completion never precedes one of its verdicts. With tracing on, each
image is published on its own (in a task of its own), so its ``emit`` and ``persist`` spans
are its own.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from streamproc import metrics, tracing
from streamproc.bus.publisher import Publisher
from streamproc.runner.delta import FindingKey

Item = tuple[str, bytes, str]
"""(subject, data, message id) of one publish."""


@dataclass(slots=True)
class Record:
    """One image's outcome, encoded and ready to publish."""

    tenant: str
    run_id: str
    digest: str
    verdict: Item
    notify: Item | None
    """None for a failed image (no Notify message)."""
    kind: str | None
    """The Notify message's kind."""
    findings: list[FindingKey]
    worse: str | None
    """The worst new finding of a ``rescan.delta`` (for its metric)."""
    settled: bool = False


class Tally:
    """A segment's images in the outbox: it is settled once every one is stored or failed."""

    __slots__ = ("_idle", "error", "pending")

    def __init__(self) -> None:
        self.pending = 0
        self.error: BaseException | None = None
        self._idle = asyncio.Event()
        self._idle.set()

    def add(self) -> None:
        self.pending += 1
        self._idle.clear()

    def done(self, error: BaseException | None) -> None:
        if error is not None and self.error is None:
            self.error = error
        self.pending -= 1
        if self.pending == 0:
            self._idle.set()

    async def settled(self) -> None:
        """Until every image handed over is stored; raises the first failure."""
        await self._idle.wait()
        if self.error is not None:
            raise self.error


_OK = metrics.VERDICTS.labels("ok")
_FAILED = metrics.VERDICTS.labels("failed")
_NOTIFY = {k: metrics.NOTIFY_MESSAGES.labels(k) for k in ("rescan.delta", "report.ready")}
_WORSE = {k: metrics.DELTA_IMAGES.labels(k) for k in ("kev", "critical", "high", "other")}


class Outbox:
    def __init__(self, publisher: Publisher, stored: Callable[[Record], None]) -> None:
        """``stored(record)`` is called once an image's verdict is on the log."""
        self.publisher = publisher
        self.stored = stored
        self._queue: list[tuple[Record, Tally]] = []
        self._tasks: set[asyncio.Task[None]] = set()

    def put(self, record: Record, tally: Tally) -> None:
        tally.add()
        if not self._queue:
            task = asyncio.get_running_loop().create_task(self._flush())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        self._queue.append((record, tally))

    async def close(self) -> None:
        """Stop publishing; every image not yet stored fails its segment's tally."""
        for task in list(self._tasks):
            task.cancel()
        self._tasks.clear()
        queued, self._queue = self._queue, []
        for r, t in queued:  # handed over, but its publishing never started
            self._settle(r, t, asyncio.CancelledError())

    async def _flush(self) -> None:
        batch, self._queue = self._queue, []
        try:
            await self._publish(batch)
        except BaseException as exc:  # cancelled: the segments waiting must not hang
            for r, t in batch:
                if not r.settled:
                    self._settle(r, t, exc)
            raise

    async def _publish(self, batch: list[tuple[Record, Tally]]) -> None:
        if tracing.enabled():  # a span per image and publish: one task each
            await asyncio.gather(*(self._publish_one(r, t) for r, t in batch))
            return
        noted = [(r, t) for r, t in batch if r.notify is not None]
        ready = [(r, t) for r, t in batch if r.notify is None]
        if noted:
            outcomes = await self.publisher.publish_many_settled(
                [r.notify for r, _ in noted]  # type: ignore[misc]  # filtered above
            )
            for (r, t), out in zip(noted, outcomes, strict=True):
                if isinstance(out, BaseException):
                    self._settle(r, t, out)  # no verdict without its message
                else:
                    _NOTIFY[r.kind].inc()  # type: ignore[index]  # set with every message
                    ready.append((r, t))
        if ready:
            outcomes = await self.publisher.publish_many_settled([r.verdict for r, _ in ready])
            for (r, t), out in zip(ready, outcomes, strict=True):
                self._settle(r, t, out if isinstance(out, BaseException) else None)

    async def _publish_one(self, r: Record, t: Tally) -> None:
        where = {"tenant": r.tenant, "run_id": r.run_id, "digest": r.digest}
        try:
            if r.notify is not None:
                with tracing.span("emit", **where, kind=r.kind):
                    await self.publisher.publish(*r.notify)
                _NOTIFY[r.kind].inc()  # type: ignore[index]  # set with every message
            with tracing.span("persist", **where):
                await self.publisher.publish(*r.verdict)
        except Exception as exc:
            self._settle(r, t, exc)
            return
        self._settle(r, t, None)

    def _settle(self, r: Record, t: Tally, error: BaseException | None) -> None:
        """The image's verdict is stored (or will not be): count it, tell its segment."""
        r.settled = True
        if error is None:
            if r.notify is None:
                _FAILED.inc()
            else:
                _OK.inc()
                if r.worse is not None:
                    _WORSE[r.worse].inc()
                self.stored(r)
        t.done(error)
