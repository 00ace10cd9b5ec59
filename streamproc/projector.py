"""The projector runtime: consume the event log in batches, fold, commit with the checkpoint,
then ack. Exactly-once state over at-least-once delivery, and fail-closed on gaps.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Sequence
from typing import Any

from streamproc import metrics
from streamproc.bus import ack, jsapi
from streamproc.bus.fastclient import FastClient
from streamproc.bus.pull import ConsumerGone, PullLoop, RawMessage
from streamproc.cancellation import checkpoint
from streamproc.names import projector_consumer
from streamproc.projection import Folded, Folder, Projection
from streamproc.state.keys import Checkpoint
from streamproc.state.store import Store

log = logging.getLogger(__name__)


DURABLE_IDLE_NS = 24 * 3600 * 1_000_000_000
"""A durable projector consumer nobody pulled from for a day is removed by the server (a
start recreates its own from the checkpoint anyway)."""
CONSUMER_RECOVERY_S = 60.0
"""How long a projector keeps recreating a consumer that keeps vanishing before it stops."""


def report(role: str, folded: Folded, *, log_each: bool = True, tallies: bool = True) -> None:
    """Count a committed batch's outcome (with what its folds tallied), and log each rejected
    or quarantined event once (at warning, with its id and reasons). Outside the fold: folds
    stay pure, and a batch that did not commit counts nothing. ``tallies=False`` (a rebuild)
    leaves out what the folds tallied: the live process counted it when it applied them."""
    by_event = folded.rejected_events()
    metrics.EVENTS_APPLIED.labels(role, "applied").inc(folded.applied)
    if by_event:
        metrics.EVENTS_APPLIED.labels(role, "rejected").inc(len(by_event))
    if folded.quarantined:
        metrics.EVENTS_APPLIED.labels(role, "quarantined").inc(len(folded.quarantined))
    for r in folded.rejected:
        metrics.REJECTED.labels(r.projection, r.reason).inc()
    for q in folded.quarantined:
        metrics.QUARANTINED.labels(role, q.reason).inc()
    if tallies:
        for (counter, labels), n in folded.counts.items():
            counter.labels(*labels).inc(n)
    if not log_each:
        return
    for seq, rs in by_event.items():
        why = "; ".join(
            f"{r.projection}: {r.reason}" + (f" ({r.detail[:300]})" if r.detail else "") for r in rs
        )
        first = rs[0]
        log.warning(
            "%s: event %s (%s, sequence %d) rejected by %s",
            role,
            first.event_id,
            first.kind,
            seq,
            why,
        )
    for q in folded.quarantined:
        detail = f" ({q.detail[:300]})" if q.detail else ""
        log.warning(
            "%s: message at sequence %d on %s quarantined: %s%s",
            role,
            q.seq,
            q.subject,
            q.reason,
            detail,
        )


class PositionError(RuntimeError):
    """The stream no longer holds what this state was built from; refuse to go on."""


def check_position(
    stream: str,
    cp: Checkpoint | None,
    epoch: str,
    first_seq: int,
    last_seq: int,
    *,
    allow_partial: bool = False,
) -> int:
    """The sequence to resume from, or :class:`PositionError` saying why not (pure).

    ``allow_partial`` lets a *fresh* state start at the stream's first sequence when the
    beginning has aged out (``replay --allow-partial``); a checkpoint never skips a gap."""
    if cp is None:
        if first_seq > 1:
            if allow_partial:
                return first_seq
            raise PositionError(
                f"stream {stream} no longer starts at sequence 1 (first is {first_seq}): "
                f"events 1..{first_seq - 1} are gone, so this state cannot be built from the "
                f"log; restore the stream, or build a state that lacks them on purpose with "
                f"`streamproc replay --role ROLE --allow-partial`"
            )
        return 1
    if cp.stream != stream:
        raise PositionError(f"state was built from stream {cp.stream}, not {stream}")
    if cp.epoch != epoch:
        raise PositionError(
            f"stream {stream} was recreated: checkpoint epoch {cp.epoch}, stream created "
            f"{epoch}; its sequences mean something else now. Rebuild with `streamproc replay`"
        )
    if last_seq < cp.last_seq:
        raise PositionError(
            f"stream {stream} ends at sequence {last_seq} but this state has applied up to "
            f"{cp.last_seq}: the stream was rewound or replaced. Rebuild with `streamproc replay`"
        )
    if first_seq > cp.last_seq + 1:
        raise PositionError(
            f"retention gap on stream {stream}: state applied up to {cp.last_seq}, the stream "
            f"now starts at {first_seq}; events {cp.last_seq + 1}..{first_seq - 1} are lost. "
            f"The projector will not skip them by itself"
        )
    return cp.last_seq + 1


class Projector:
    """Hosts projections over one store and keeps them caught up with one stream."""

    def __init__(
        self,
        nc: FastClient,
        store: Store,
        projections: Sequence[Projection],
        *,
        stream: str,
        role: str,
        batch: int = 1000,
        durable: bool = True,
        consumer: str | None = None,
        subjects: str | None = None,
        log_rejections: bool = True,
        rebuild: bool = False,
        filter_subject: str | None = None,
    ) -> None:
        """``consumer`` names the durable consumer (default ``proj_<role>``): each process
        hosting a role needs its own, as every start replaces it from its checkpoint.
        ``subjects``: the event log's subject prefix, to check each event's subject
        (:class:`Folder`). ``log_rejections``: log each rejected or quarantined event
        (a rebuild from sequence 1 counts them instead). ``rebuild``: folding history
        again, not live events, so what the folds tally (chain entries appended, runs
        pruned) is not counted a second time. ``filter_subject``: fold only the stream's
        messages on it (a planner partition): their sequences skip the others', so a loss in
        flight is told by the consumer sequence instead, and ``lag()`` is the consumer's
        pending count."""
        self.nc = nc
        self.filter_subject = filter_subject
        self._cseq = 0
        """(Filtered.) The highest consumer sequence delivered since the consumer was made."""
        self.store = store
        self.stream = stream
        self.role = role
        self.batch = batch
        self.durable = durable
        self.folder = Folder(store, projections, role, subjects)
        self.log_rejections = log_rejections
        self.rebuild = rebuild
        self.consumer = consumer or projector_consumer(role)
        self.epoch = ""
        self.applied = 0
        self.head = 0
        self._pull: PullLoop | None = None
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._stop = asyncio.Event()
        self.committed = asyncio.Event()
        """Set after every committed batch; reactors wait on it."""
        self._ack = True
        self._config: dict[str, Any] = {}
        self._resumed_at = 0
        self._gone_since: float | None = None
        self.failure: BaseException | None = None
        self.pending = 0
        """(Filtered.) Messages the consumer had yet to deliver when it sent the last one."""

    async def start(self, *, ack: bool = True, allow_partial: bool = False) -> Projector:
        # A process starting with the cluster (or during an election) asks again.
        info = await jsapi.with_retries(lambda: jsapi.stream_info(self.nc, self.stream), 20.0)
        if info is None:
            if self.folder.checkpoint() is not None:
                raise PositionError(
                    f"stream {self.stream} is missing but this state has a checkpoint; "
                    f"restore the stream or rebuild with `streamproc replay`"
                )
            raise PositionError(
                f"stream {self.stream} does not exist: run `streamproc streams apply`"
            )
        cp = self.folder.checkpoint()
        start = check_position(
            self.stream,
            cp,
            info.created,
            info.state.first_seq,
            info.state.last_seq,
            allow_partial=allow_partial,
        )
        self.epoch = info.created
        self.applied = start - 1
        self._cseq = 0
        self.head = info.state.last_seq
        config: dict[str, Any] = {
            "deliver_policy": "by_start_sequence",
            "opt_start_seq": start,
            "ack_policy": "all" if ack else "none",
            "max_ack_pending": self.batch * 10,
            "ack_wait": 60 * 1_000_000_000,
            "max_deliver": -1,
            "replay_policy": "instant",
        }
        if self.filter_subject is not None:
            config["filter_subject"] = self.filter_subject
        if self.durable:
            config["durable_name"] = self.consumer
            config["inactive_threshold"] = DURABLE_IDLE_NS  # removes retired instances' ones
            await jsapi.with_retries(
                lambda: jsapi.delete_consumer(self.nc, self.stream, self.consumer), 20.0
            )
        else:
            self.consumer = f"{self.consumer}_{int(time.time() * 1000)}"
            config["name"] = self.consumer
            config["inactive_threshold"] = 30 * 1_000_000_000
        # A stream created a moment ago (or in an election) may not answer at once: the same
        # create again is harmless (the same config).
        await jsapi.with_retries(lambda: jsapi.create_consumer(self.nc, self.stream, config), 20.0)
        self._config = config
        self._ack = ack
        self._pull = await PullLoop(self.nc, self.stream, self.consumer, batch=self.batch).start()
        metrics.LAST_APPLIED_SEQ.labels(self.role).set(self.applied)
        return self

    async def step(self, timeout: float = 1.0) -> int:
        """Fold and commit one batch (whatever has arrived, up to ``batch``)."""
        assert self._pull is not None
        try:
            msgs = await self._pull.next_batch(self.batch, timeout)
        except ConsumerGone as exc:
            await self._recover(exc)
            return 0
        self._gone_since = None
        if not msgs:
            return 0
        return await self._apply(msgs)

    async def _recover(self, exc: ConsumerGone) -> None:
        """Our consumer or the server holding it went away (a NATS node shut down, its
        leader moved, an operator deleted it): the checkpoint says where we are, so recreate
        the consumer from there — unless the stream itself was recreated (fail closed) or
        the consumer keeps vanishing for longer than ``CONSUMER_RECOVERY_S``."""
        now = time.monotonic()
        if self._gone_since is None:
            self._gone_since = now
        elif now - self._gone_since > CONSUMER_RECOVERY_S:
            raise exc
        info = await jsapi.with_retries(lambda: jsapi.stream_info(self.nc, self.stream))
        if info is None or info.created != self.epoch:
            raise exc
        log.warning("%s: recreating it from sequence %d", exc, self.applied + 1)
        await asyncio.sleep(0.25)
        await self._resume(self.applied + 1)

    async def _apply(self, msgs: list[RawMessage]) -> int:
        t0 = time.perf_counter()
        expected = self.applied + 1
        items: list[RawMessage] = []
        gap: PositionError | None = None
        for m in msgs:
            seq = m[0]
            if seq < expected:
                continue  # a redelivery of something already committed
            if self.filter_subject is not None:
                info = ack.parse(m[3])
                if info.consumer_seq > self._cseq + 1:
                    gap = PositionError(
                        f"gap on the {self.filter_subject} consumer of {self.stream}: "
                        f"consumer sequence {info.consumer_seq} after {self._cseq}"
                    )
                    break
                self._cseq = max(self._cseq, info.consumer_seq)
                self.pending = info.pending
                items.append(m)
                expected = seq + 1
                continue
            if seq != expected:
                gap = PositionError(
                    f"gap on stream {self.stream}: expected sequence {expected}, received "
                    f"{seq}; events {expected}..{seq - 1} were removed before this "
                    f"projector applied them"
                )
                break
            items.append(m)
            expected += 1
        if items:
            last = items[-1][0]
            folded = self.folder.apply(items, Checkpoint(self.stream, self.epoch, last))
            self.applied = last
            self.head = max(self.head, last)
            if self.filter_subject is not None:  # lag() is what the consumer has pending
                self.head = last + self.pending
            metrics.LAST_APPLIED_SEQ.labels(self.role).set(last)
            report(self.role, folded, log_each=self.log_rejections, tallies=not self.rebuild)
            metrics.BATCH_SECONDS.labels(self.role).observe(time.perf_counter() - t0)
            self.committed.set()
            self._wake()
        if gap is not None:
            if self.filter_subject is not None:  # still in the stream: read on from there
                log.warning("%s; resuming from %d", gap, self.applied + 1)
                await self._resume(self.applied + 1)
                return len(items)
            if not await self._still_stored(expected):
                raise gap
            # Messages lost in flight (our server died, the consumer's leader moved) come back
            # only after ack_wait: the events are still in the stream, so read on from them.
            log.warning("%s; they are still in the stream: resuming from %d", gap, expected)
            await self._resume(expected)
            return len(items)
        if self._ack and self._pull is not None:
            await self._pull.ack_all(msgs[-1])
        return len(items)

    async def _still_stored(self, seq: int) -> bool:
        """Whether the stream (the same one, not recreated) still holds ``seq`` — and we did
        not already resume from it (a message removed meanwhile would loop us otherwise)."""
        if self._resumed_at == seq:
            return False
        info = await jsapi.with_retries(lambda: jsapi.stream_info(self.nc, self.stream))
        if info is None or info.created != self.epoch:
            return False
        get = f"STREAM.MSG.GET.{self.stream}"
        try:
            await jsapi.with_retries(lambda: jsapi.request(self.nc, get, {"seq": seq}))
        except jsapi.JsApiError as exc:
            if exc.err_code == jsapi.NO_MESSAGE:
                return False
            raise
        self._resumed_at = seq
        return True

    async def _resume(self, seq: int) -> None:
        """Replace the consumer with one that starts at ``seq`` (retried through the leader
        election that usually caused the loss)."""
        if self._pull is not None:
            pull, self._pull = self._pull, None
            await pull.close()
        config = {**self._config, "opt_start_seq": seq}
        self._cseq = 0
        await jsapi.with_retries(lambda: jsapi.delete_consumer(self.nc, self.stream, self.consumer))
        await jsapi.with_retries(lambda: jsapi.create_consumer(self.nc, self.stream, config))
        self._pull = await PullLoop(self.nc, self.stream, self.consumer, batch=self.batch).start()

    def _wake(self) -> None:
        if not self._waiters:
            return
        keep = []
        for seq, fut in self._waiters:
            if seq <= self.applied:
                if not fut.done():
                    fut.set_result(None)
            else:
                keep.append((seq, fut))
        self._waiters = keep

    async def wait_for(self, seq: int, timeout: float = 10.0) -> None:
        """Return once the state reflects stream sequence ``seq`` (read-your-writes)."""
        if self.applied >= seq:
            return
        if self.failure is not None:
            raise self.failure
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append((seq, fut))
        try:  # not wait_for: see cancellation.py
            async with asyncio.timeout(timeout):
                await fut
        finally:
            fut.cancel()  # a no-op once resolved

    async def run(self, until_seq: int | None = None) -> None:
        """Fold until stopped (or until ``until_seq`` is applied). I/O errors stop the
        process rather than skip: nothing is acked that was not committed."""
        try:
            while not self._stop.is_set():
                checkpoint()
                if until_seq is not None and self.applied >= until_seq:
                    return
                await self.step()
                # While a backlog is buffered nothing above suspends; yield once a batch so
                # HTTP, other roles and acks in the same process are served.
                await asyncio.sleep(0)
        except BaseException as exc:
            self.failure = exc
            for _, fut in self._waiters:
                if not fut.done():
                    fut.set_exception(exc)
            raise
        finally:
            await self.close()

    def stop(self) -> None:
        self._stop.set()

    async def close(self) -> None:
        if self._pull is not None:
            pull, self._pull = self._pull, None
            await pull.close()
            if not self.durable:
                with contextlib.suppress(Exception):
                    await jsapi.delete_consumer(self.nc, self.stream, self.consumer)

    def lag(self) -> int:
        return max(0, self.head - self.applied)
