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

import nats.errors

from streamproc import metrics
from streamproc.bus import jsapi
from streamproc.bus.ack import delivery
from streamproc.bus.fastclient import FastClient
from streamproc.bus.pull import REPLY, ConsumerGone, PullLoop, RawMessage
from streamproc.cancellation import checkpoint
from streamproc.names import projector_consumer
from streamproc.runtime.batching import BatchSizer
from streamproc.runtime.deliveries import gap_message, passed_over_gap, removed, scan
from streamproc.runtime.fold_report import report
from streamproc.runtime.position import PositionError, check_position
from streamproc.runtime.projection import Folder, Projection
from streamproc.state.keys import Checkpoint
from streamproc.state.malloc import DEFAULT_TRIM_S
from streamproc.state.store import Store

log = logging.getLogger(__name__)


DURABLE_IDLE_NS = 24 * 3600 * 1_000_000_000
"""A durable projector consumer nobody pulled from for a day is removed by the server (a
start recreates its own from the checkpoint anyway)."""
CONSUMER_RECOVERY_S = 60.0
"""How long a projector keeps recreating a consumer that keeps vanishing before it stops."""
SYNC_GRACE_S = 0.02
"""How long a waiter gives its sequence to arrive before asking the consumer whether it ever
will (:meth:`Projector.sync`); then twice as long each time, up to a second."""
SYNC_FAILURES = (jsapi.JsApiError, nats.errors.Error, ConnectionError)
"""What asking the stream or the consumer may fail with while NATS is away or electing: a
sync or a lag report that meets one is only put off."""
MAX_RESUMES = 3
"""Deliveries lost again and again at one position: the projector stops instead of looping."""


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
        filter_subjects: Sequence[str] | None = None,
        trim_interval_s: float = DEFAULT_TRIM_S,
        batch_max_s: float | None = None,
    ) -> None:
        """``consumer`` names the durable consumer (default ``proj_<role>``): each process
        hosting a role needs its own, as every start replaces it from its checkpoint.
        ``subjects``: the event log's subject prefix, to check each event's subject
        (:class:`Folder`). ``log_rejections``: log each rejected or quarantined event
        (a rebuild from sequence 1 counts them instead). ``rebuild``: folding history
        again, not live events, so what the folds tally (chain entries appended, runs
        pruned) is not counted a second time. ``filter_subjects``: the subjects of the kinds
        the projections fold (:func:`streamproc.events.filters.filter_subjects`), for the
        consumer to deliver nothing else (a planner partition's: its subjects); None or empty:
        the whole stream. ``trim_interval_s``: ``projector.malloc_trim_s``, as configured
        (:func:`streamproc.state.settings.trim_from`). ``batch_max_s``:
        ``projector.batch_max_s`` (:mod:`streamproc.runtime.batching`); None: every batch up
        to ``batch`` events, however long it takes."""
        self.nc = nc
        self.store = store
        self.stream = stream
        self.role = role
        self.batch = batch
        self.sizer = BatchSizer(batch, batch_max_s)
        self.durable = durable
        self.folder = Folder(store, projections, role, subjects, trim_interval_s)
        self.log_rejections = log_rejections
        self.rebuild = rebuild
        self.consumer = consumer or projector_consumer(role)
        self.filter_subjects = list(filter_subjects or ())
        self.epoch = ""
        self.applied = 0
        """The position: every event of the folded kinds up to this sequence is applied."""
        self.head = 0
        self.received = 0
        """Messages handed to the folds since this object started."""
        self._dseq = 0
        """The consumer's number of the last delivery accounted for (deliveries are numbered
        one by one, whatever the filter skips)."""
        self._pending = 0
        """Messages of the filter the consumer had not delivered, as it last said."""
        self._sync_lock = asyncio.Lock()
        self._error: PositionError | None = None
        """A gap a sync outside the loop found: the loop raises it."""
        self._pull: PullLoop | None = None
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._stop = asyncio.Event()
        self.committed = asyncio.Event()
        """Set after every committed batch; reactors wait on it."""
        self._ack = True
        self._config: dict[str, Any] = {}
        self._resumes = 0
        self._gone_since: float | None = None
        self.failure: BaseException | None = None

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
        if self.filter_subjects:
            config["filter_subjects"] = self.filter_subjects
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
        # create again is harmless (the same config). A durable left by an older build with
        # other filters is gone already: every start replaces it from the checkpoint.
        created = await jsapi.with_retries(
            lambda: jsapi.create_consumer(self.nc, self.stream, config), 20.0
        )
        self._created(created)
        self._config = config
        self._ack = ack
        self._pull = await PullLoop(self.nc, self.stream, self.consumer, batch=self.batch).start()
        metrics.LAST_APPLIED_SEQ.labels(self.role).set(self.applied)
        metrics.BATCH_EVENTS.labels(self.role).set(self.sizer.size)
        return self

    def _created(self, info: dict[str, Any]) -> None:
        """A new consumer numbers its deliveries from 1 and says what it holds for us."""
        self._dseq = 0
        self._pending = int(info.get("num_pending") or 0)

    async def step(self, timeout: float = 1.0) -> int:
        """Fold and commit one batch (whatever has arrived, up to ``batch``); when nothing
        has arrived and a projection has deferred work, one flush of it instead."""
        assert self._pull is not None
        if self._error is not None:
            raise self._error
        if self._pull.buffered == 0 and self.folder.has_deferred():
            # Nothing has arrived: a slice of deferred work instead of waiting, then look
            # again (the pull loop buffers what arrives meanwhile).
            self.folder.tidy()
        else:
            try:
                msgs = await self._pull.next_batch(self.sizer.size, timeout)
            except ConsumerGone as exc:
                await self._recover(exc)
                return 0
            self._gone_since = None
            if msgs:
                return await self._apply(msgs)
        if self._wants_sync(idle=True):  # quiet: pass what the filter kept from us
            with contextlib.suppress(*SYNC_FAILURES):  # an election: only later
                await self.sync()
            if self._error is not None:
                raise self._error
        return 0

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
        got = scan(msgs, self.applied, self._dseq, self._pending, self.consumer)
        items = got.items
        gap = await self._gap(got.skips) if got.skips else None
        if gap is not None:
            del items[gap[0] :]
        self.received += len(items)
        if items:
            last = items[-1][0]
            folded = self.folder.apply(items, Checkpoint(self.stream, self.epoch, last))
            self.applied = last
            self.head = max(self.head, last)
            self._resumes = 0
            metrics.LAST_APPLIED_SEQ.labels(self.role).set(last)
            report(self.role, folded, log_each=self.log_rejections, tallies=not self.rebuild)
            took = time.perf_counter() - t0
            metrics.BATCH_SECONDS.labels(self.role).observe(took)
            self.sizer.observe(len(items), took)
            metrics.BATCH_EVENTS.labels(self.role).set(self.sizer.size)
            self.committed.set()
            self._wake()
        if gap is not None:
            raise gap[1]
        if got.lost:
            # Lost in flight: still in the stream, so read on from it with a new consumer.
            self._resumes += 1
            if self._resumes > MAX_RESUMES:
                raise PositionError(f"{got.lost}, {self._resumes} times at {self.applied + 1}")
            log.warning("%s; reading on from sequence %d", got.lost, self.applied + 1)
            await self._resume(self.applied + 1)
            return len(items)
        self._dseq, self._pending = got.dseq, got.pending
        if self._ack and self._pull is not None:
            await self._pull.ack_all(msgs[-1])
        return len(items)

    async def _gap(self, skips: list[tuple[int, int, int]]) -> tuple[int, PositionError] | None:
        """Where to cut the batch, and why, if sequences the consumer passed over were
        removed before it reached them."""
        found = await passed_over_gap(
            self.nc,
            self.stream,
            self.epoch,
            self.applied,
            skips,
            filtered=bool(self.filter_subjects),
        )
        return None if found is None else (found[0], PositionError(found[1]))

    def _wants_sync(self, *, idle: bool) -> bool:
        """A filtered consumer with nothing left to deliver, and a sequence past the position
        wanted: by a waiter (who asks, :meth:`wait_for`), or, while the loop is idle, the
        stream head last seen."""
        if not self.filter_subjects or self.lag() > 0:
            return False
        wanted = max((seq for seq, _ in self._waiters), default=0)
        if idle:
            wanted = max(wanted, self.head)
        return wanted > self.applied

    async def sync(self) -> bool:
        """Move the position over events the filter kept from us; returns whether it moved.

        A filtered consumer never delivers the kinds the role does not fold, so applying
        alone never reaches them. This asks: the stream's last sequence, then the consumer;
        if the consumer has nothing pending and delivered nothing we have not applied, every
        event of our kinds up to that last sequence is applied, so the position (and the
        checkpoint) moves there — unless the stream removed events past the position
        meanwhile (a gap: kept for the loop to raise)."""
        if not self.filter_subjects or self._pull is None:
            return False
        async with self._sync_lock:
            head = await jsapi.stream_info(self.nc, self.stream)
            if head is None:
                return False
            self.head = max(self.head, head.state.last_seq)
            if head.state.last_seq <= self.applied:
                return False
            consumer = await jsapi.consumer_info(self.nc, self.stream, self.consumer)
            if consumer is None or consumer.num_pending:
                return False
            if consumer.delivered.consumer_seq > self._dseq:
                return False  # delivered and not yet applied: the loop is on it
            last = head.state.last_seq
            # The consumer's pending count can lag a message the stream has just stored:
            # passing over one of our kinds would drop it when it is delivered. The stream
            # itself says where the next one is.
            for subject in self.filter_subjects:
                nxt = await jsapi.next_on_subject(self.nc, self.stream, self.applied + 1, subject)
                if nxt is not None and nxt <= last:
                    last = nxt - 1
            if last <= self.applied:
                return False
            after = await jsapi.stream_info(self.nc, self.stream)
            lost = await removed(
                self.nc, self.stream, self.epoch, after, [(self.applied + 1, last)]
            )
            if lost is not None:
                self._error = PositionError(gap_message(self.stream, lost[1], self.applied))
                return False
            if last <= self.applied:
                return False  # the loop applied past it meanwhile
            self.folder.advance(Checkpoint(self.stream, self.epoch, last))
            self.applied = last
            metrics.LAST_APPLIED_SEQ.labels(self.role).set(last)
            self._wake()
            return True

    async def _resume(self, seq: int) -> None:
        """Replace the consumer with one that starts at ``seq`` (retried through the leader
        election that usually caused the loss)."""
        if self._pull is not None:
            pull, self._pull = self._pull, None
            await pull.close()
        config = {**self._config, "opt_start_seq": seq}
        await jsapi.with_retries(lambda: jsapi.delete_consumer(self.nc, self.stream, self.consumer))
        created = await jsapi.with_retries(
            lambda: jsapi.create_consumer(self.nc, self.stream, config)
        )
        self._created(created)
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

    async def next_commit(self, timeout: float | None) -> None:
        """Until a batch commits, or ``timeout`` seconds (None: no limit). ``asyncio.timeout``,
        not ``wait_for``: on 3.11 ``wait_for`` can swallow the cancellation a stop sends."""
        try:
            async with asyncio.timeout(timeout):
                await self.committed.wait()
        except TimeoutError:
            pass
        self.committed.clear()

    async def wait_for(self, seq: int, timeout: float = 10.0) -> None:
        """Return once the state reflects stream sequence ``seq`` (read-your-writes)."""
        if self.applied >= seq:
            return
        if self.failure is not None:
            raise self.failure
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append((seq, fut))
        self.head = max(self.head, seq)
        try:  # not wait_for: see cancellation.py
            async with asyncio.timeout(timeout):
                pause = SYNC_GRACE_S
                while self.filter_subjects and not fut.done():
                    # ``seq`` may be of a kind we never receive: unless it arrives at once (a
                    # write of our own kinds, folded in a few ms), ask the consumer, less and
                    # less often. A sync that fails here only means waiting on.
                    await asyncio.wait([fut], timeout=pause)
                    pause = min(2 * pause, 1.0)
                    if not fut.done() and self._wants_sync(idle=False):
                        with contextlib.suppress(*SYNC_FAILURES):
                            await self.sync()
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
            self.finish()  # a clean stop leaves nothing deferred
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

    def finish(self) -> None:
        """Do the projections' deferred work now (a clean stop, once the task running
        :meth:`run` has ended or been cancelled): the state left then depends only on the
        events folded. A failure leaves the work for the next start, which redoes it."""
        try:
            self.folder.finish()
        except Exception:
            log.exception("%s: deferred work left for the next start", self.role)

    async def close(self) -> None:
        if self._pull is not None:
            pull, self._pull = self._pull, None
            await pull.close()
            if not self.durable:
                with contextlib.suppress(Exception):
                    await jsapi.delete_consumer(self.nc, self.stream, self.consumer)

    async def ask_lag(self) -> int:
        """:meth:`lag`, with the consumer's pending asked now (a report of the lag: the status
        heartbeat, readiness), so events published since its last delivery count too — also
        while the fold is stopped."""
        try:
            info = await jsapi.consumer_info(self.nc, self.stream, self.consumer)
        except SYNC_FAILURES:
            return self.lag()  # what it last knew (a stream gone, NATS away)
        pull = self._pull
        if info is not None and (pull is None or not pull.buffered):
            # what it holds, and what it delivered that is not applied (on its way to us, or
            # to the inbox of a fold that stopped)
            unapplied = max(0, info.delivered.consumer_seq - self._dseq)
            self._pending = info.num_pending + unapplied
        return self.lag()

    def lag(self) -> int:
        """Events of the folded kinds not applied yet: what the consumer had left to deliver
        at its last delivery, plus what is received and not folded. (The position may still
        be below the head: events the filter keeps from us, passed by :meth:`sync`.)"""
        pull = self._pull
        last = pull.last_buffered() if pull is not None else None
        if pull is None or last is None:
            return self._pending
        return delivery(last[REPLY])[1] + pull.buffered
