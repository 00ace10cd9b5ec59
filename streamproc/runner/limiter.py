"""Pacing scanner calls with leaky buckets shared by every runner process.

A call names its buckets (:class:`BucketSpec`): a report call its run's (``ratePerSecond``
over all the run's segments) and its tenant's, a registry call of a content refresh its
registry host's. It proceeds once it holds a token of each. Tokens come from the shared
buckets in JetStream KV (:mod:`streamproc.runner.ratebucket`), taken in batches so that most
calls cost no round trip:

- Per bucket, one task of this process takes tokens for everyone waiting here: as many as
  are waiting, and while the bucket is not the limit as many again for the next callers
  (within what may be held, and :data:`MAX_BATCH`). While it is the limit, it waits until
  as many tokens as are waiting here conform (at most half the bucket's tolerance) and
  takes them at once, so runners take turns by the batch rather than race for every
  token. Waiters are served first come, first served.
- A token not used within the bucket's hold (a quarter of its burst) is dropped: that is
  what bounds the calls of any window to the rate plus one burst (:mod:`.gcra`).
- A call with several buckets waits in line at the one that held callers back most
  recently, then asks the others for a token without waiting. If one has none to give now,
  the call hands its tokens back to this process's stock (where the next caller uses them)
  and waits in line at that bucket instead. So a token is never held while its holder
  waits for another bucket, and none of a shared bucket's tokens is wasted on such a wait.
- When no token conforms, the task sleeps until one does (plus a little jitter, so runners
  do not collide) and each caller that waited counts once in
  ``scheduler_rate_limited_total{reason}`` (``run_rate``, ``tenant_bucket``,
  ``registry_bucket``). When NATS does not answer, callers wait and it is asked again with
  backoff (``reason="bucket_unavailable"``): no call goes out without its tokens.
- A call whose run is cancelled stops waiting at once (:class:`Stopped`).

A runner killed while holding tokens just leaves them unused.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import logging
import random
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from streamproc import metrics
from streamproc.runner import gcra
from streamproc.runner.ratebucket import SYNC_EVERY_NS, Conflict, RateStore, Unavailable

log = logging.getLogger(__name__)

MAX_BATCH = 256
"""Most tokens one compare-and-set takes."""
IDLE_NS = 120 * 1_000_000_000
"""A bucket nobody asked for this long is forgotten by this process (the KV keeps it)."""
CAS_TRIES = 16
BACKOFF_S = (0.05, 2.0)


class Stopped(Exception):
    """The caller's stop event was set while it waited (its run was cancelled)."""


@dataclass(frozen=True)
class BucketSpec:
    key: str
    rate: float
    burst_s: float
    reason: str
    """The ``scheduler_rate_limited_total`` label of a wait it causes."""


class _Waiter:
    __slots__ = ("fut", "limited", "patient", "unavailable")

    def __init__(self, fut: asyncio.Future[int], patient: bool) -> None:
        self.fut = fut
        self.patient = patient
        """Waits until a token conforms; an impatient waiter is answered NONE instead."""
        self.limited = False
        """It waited while no token conformed (a real wait for the rate)."""
        self.unavailable = False
        """It waited while the bucket did not answer."""


NONE = -1
"""A token refused to an impatient waiter: none conforms now."""
STOPPED = -2
"""What a waiter whose stop event was set is answered instead of a token."""


class _StopWatch:
    """The waiters of one stop event: one task awaits the event for all of them (not one
    per wait), and answers :data:`STOPPED` to those still waiting when it is set. It ends
    once its last waiter is answered, so a segment's event leaves no task behind."""

    __slots__ = ("futs", "stop", "task", "watches")

    def __init__(self, stop: asyncio.Event, watches: dict[asyncio.Event, _StopWatch]) -> None:
        self.futs: set[asyncio.Future[int]] = set()
        self.stop = stop
        self.watches = watches
        self.task = asyncio.ensure_future(stop.wait())
        self.task.add_done_callback(self._stopped)
        watches[stop] = self

    def add(self, fut: asyncio.Future[int]) -> None:
        self.futs.add(fut)
        fut.add_done_callback(self._forget)

    def _stopped(self, task: asyncio.Future[Any]) -> None:
        if task.cancelled():
            return
        for fut in self.futs:
            if not fut.done():
                fut.set_result(STOPPED)

    def _forget(self, fut: asyncio.Future[int]) -> None:
        self.futs.discard(fut)
        if not self.futs:
            self.task.cancel()
            if self.watches.get(self.stop) is self:
                del self.watches[self.stop]


class _Bucket:
    def __init__(self, spec: BucketSpec) -> None:
        self.spec = spec
        self.g = gcra.params(spec.rate, spec.burst_s)
        self.stock: list[int] = []
        """Expiry (local monotonic ns) of each token held here, soonest first."""
        self.waiters: deque[_Waiter] = deque()
        self.task: asyncio.Task[None] | None = None
        self.revision: int | None = None
        self.tat = 0
        self.ahead = True
        """The last take got all it asked: the bucket is not the limit, take a batch ahead."""
        self.last_take = 0
        self.ready_at = 0
        """While no token conforms: when the next one will (local monotonic ns)."""
        self.limited_at = 0
        """When this bucket last held callers back (local monotonic ns)."""
        self.used = 0

    def respec(self, spec: BucketSpec) -> None:
        if spec != self.spec:
            self.spec = spec
            self.g = gcra.params(spec.rate, spec.burst_s)

    def ahead_of(self, waiting: int) -> int:
        """Taken while the bucket is not the limit: as many again as are waiting (the next
        callers' tokens), within what may be held and :data:`MAX_BATCH` — not more, or
        tokens this runner cannot use in time would be kept from the others."""
        held = self.g.hold_ns // self.g.interval_ns
        return max(1, min(MAX_BATCH, max(waiting, min(held, 2 * waiting))))

    def share(self, waiting: int) -> int:
        """Taken at once while the bucket is the limit: up to half what its tolerance holds,
        so runners take turns by the batch instead of racing for every token."""
        return max(1, min(waiting, (self.g.tolerance_ns // self.g.interval_ns + 1) // 2))

    def drop_expired(self, now: int) -> None:
        cut = bisect.bisect_right(self.stock, now)
        if cut:
            del self.stock[:cut]

    def give(self, expiry: int) -> None:
        bisect.insort(self.stock, expiry)
        self.hand_out()

    def hand_out(self) -> None:
        while self.stock and self.waiters:
            w = self.waiters.popleft()
            if not w.fut.done():
                w.fut.set_result(self.stock.pop(0))

    def held_back(self, *, unavailable: bool) -> None:
        """No token now: impatient waiters get NONE, the patient ones know they waited."""
        keep: deque[_Waiter] = deque()
        for w in self.waiters:
            if w.fut.done():
                continue
            if w.patient:
                if unavailable:
                    w.unavailable = True
                else:
                    w.limited = True
                keep.append(w)
            else:
                w.fut.set_result(NONE)
        self.waiters = keep

    def waiting(self) -> int:
        while self.waiters and self.waiters[0].fut.done():
            self.waiters.popleft()
        return sum(1 for w in self.waiters if not w.fut.done())


class Limiter:
    """The buckets this runner process uses, over one :class:`RateStore`."""

    def __init__(self, store: RateStore, rng: random.Random | None = None) -> None:
        self.store = store
        self.rng = rng or random.Random()
        self._buckets: dict[str, _Bucket] = {}
        self._swept = 0
        self._warned = False
        self._clock: asyncio.Task[None] | None = None
        self._stops: dict[asyncio.Event, _StopWatch] = {}
        """The stop events some caller waits with (:class:`_StopWatch`)."""

    def start(self) -> None:
        """Measure the server's clock every sync period in the background, so a call never
        waits for it (without this, the first call of a period measures it)."""
        if self._clock is None:
            self._clock = asyncio.create_task(self._sync_clock(), name="rate-clock")

    async def _sync_clock(self) -> None:
        while True:
            try:
                await self.store.sync_clock()
            except Unavailable as exc:
                log.debug("server clock not measured: %s", exc)
                await asyncio.sleep(0.5)
                continue
            await asyncio.sleep(SYNC_EVERY_NS / 1e9)

    async def acquire(self, specs: Sequence[BucketSpec], stop: asyncio.Event | None = None) -> None:
        """Wait for one token of each bucket (:class:`Stopped` if ``stop`` is set first)."""
        now = time.monotonic_ns()
        buckets = [self._bucket(s, now) for s in specs]
        if not buckets:
            return
        line = max(buckets, key=lambda b: b.limited_at)
        while True:
            hand = [(line, await self._token(line, stop, patient=True))]
            short = None
            for b in buckets:
                if b is not line:
                    expiry = await self._token(b, stop, patient=False)
                    if expiry == NONE:
                        short = b
                        break
                    hand.append((b, expiry))
            now = time.monotonic_ns()
            stale = [b for b, expiry in hand if expiry <= now]
            if short is None and not stale:
                return
            for b, expiry in hand:
                if expiry > now:
                    b.give(expiry)
            line = short or stale[0]

    async def close(self) -> None:
        tasks: list[asyncio.Future[Any]] = [
            b.task for b in self._buckets.values() if b.task is not None
        ]
        if self._clock is not None:
            tasks.append(self._clock)
            self._clock = None
        tasks += [w.task for w in self._stops.values()]
        self._stops.clear()
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(BaseException):
                await t
        self._buckets.clear()

    def _bucket(self, spec: BucketSpec, now: int) -> _Bucket:
        b = self._buckets.get(spec.key)
        if b is None:
            b = self._buckets[spec.key] = _Bucket(spec)
        else:
            b.respec(spec)
        b.used = now
        if now - self._swept > IDLE_NS:
            self._swept = now
            for key, old in list(self._buckets.items()):
                if now - old.used > IDLE_NS and old.task is None and not old.waiters:
                    del self._buckets[key]
        return b

    async def _token(self, b: _Bucket, stop: asyncio.Event | None, *, patient: bool) -> int:
        """The expiry of one token of ``b``: from this process's stock, or by waiting in
        line; an impatient caller gets :data:`NONE` when no token conforms now."""
        now = time.monotonic_ns()
        b.drop_expired(now)
        if b.stock and not b.waiting():
            if b.ahead and len(b.stock) <= b.last_take // 2:
                # Half of what was taken last is used: take the next batch before the
                # callers find the stock empty (they would wait a round trip each time).
                self._prefetch(b, b.last_take)
            return b.stock.pop(0)
        if not patient and b.ready_at > now:
            return NONE
        fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        waiter = _Waiter(fut, patient)
        b.waiters.append(waiter)
        if b.task is None:
            b.task = asyncio.create_task(self._serve(b), name=f"rate-{b.spec.key}")
        if stop is not None:
            watch = self._stops.get(stop)
            if watch is None or watch.task.done():
                watch = _StopWatch(stop, self._stops)
            watch.add(fut)
        try:
            expiry = await fut
        except BaseException:
            if fut.done() and not fut.cancelled() and fut.result() > 0:
                b.give(fut.result())  # handed to us as we stopped: the next caller's
            fut.cancel()
            raise
        if expiry == STOPPED:
            raise Stopped(b.spec.key)
        if waiter.limited:
            metrics.RATE_LIMITED.labels(b.spec.reason).inc()
        if waiter.unavailable:
            metrics.RATE_LIMITED.labels("bucket_unavailable").inc()
        return expiry

    def _prefetch(self, b: _Bucket, n: int) -> None:
        """Take ``n`` tokens of ``b`` for callers about to ask, unless a take is under way."""
        if b.task is None:
            b.task = asyncio.create_task(self._serve(b, n), name=f"rate-{b.spec.key}")

    async def _serve(self, b: _Bucket, ahead: int = 0) -> None:
        """Take tokens for the callers waiting on ``b`` until none is left (first
        ``ahead`` tokens for those about to ask, if the bucket is not the limit)."""
        backoff = BACKOFF_S[0]
        try:
            while True:
                b.drop_expired(time.monotonic_ns())
                b.hand_out()
                waiting = b.waiting()
                if not waiting and not (ahead and b.ahead):
                    return
                want = b.ahead_of(max(waiting, ahead)) if b.ahead else b.share(waiting)
                ahead = 0
                try:
                    got, wait_ns = await self._take(b, want)
                except Exception as exc:  # Unavailable, or a bug: the callers wait either way
                    b.held_back(unavailable=True)
                    if not self._warned:
                        self._warned = True
                        log.warning(
                            "rate bucket %s unavailable, calls wait: %s",
                            b.spec.key,
                            exc,
                            exc_info=not isinstance(exc, Unavailable),
                        )
                    await asyncio.sleep(backoff * self.rng.uniform(0.5, 1.0))
                    backoff = min(BACKOFF_S[1], backoff * 2)
                    continue
                if self._warned:
                    self._warned = False
                    log.info("rate buckets answer again")
                backoff = BACKOFF_S[0]
                b.ahead = got >= want
                if got:
                    continue
                now = time.monotonic_ns()
                b.limited_at = now
                b.ready_at = now + wait_ns
                b.held_back(unavailable=False)
                spread = min(b.g.interval_ns, b.g.tolerance_ns)
                await asyncio.sleep((wait_ns + self.rng.uniform(0, spread)) / 1e9)
        finally:
            b.task = None

    async def _take(self, b: _Bucket, want: int) -> tuple[int, int]:
        """(tokens granted into ``b.stock``, 0) or (0, ns until one conforms)."""
        store = self.store
        if store.clock.stale(time.monotonic_ns(), periods=3):  # the background sync lags
            await store.sync_clock()
        for _ in range(CAS_TRIES):
            if b.revision is None:
                entry = await store.read(b.spec.key)
                b.revision, b.tat = (entry.revision, entry.state.tat) if entry else (0, 0)
            local = time.monotonic_ns()
            now = store.clock.at(local)
            t = gcra.take(b.g, b.tat, now, want)
            if not t.granted:
                return 0, t.retry_ns - now
            try:
                b.revision = await store.write(b.spec.key, t.tat_ns, b.revision)
            except Conflict as c:
                if c.current is None:
                    b.revision = None  # gone, or moved on again: read the last
                else:
                    b.revision, b.tat = c.current.revision, c.current.state.tat
                continue
            b.tat = t.tat_ns
            b.last_take = t.granted
            b.stock.extend([local + b.g.hold_ns] * t.granted)
            b.stock.sort()
            return t.granted, 0
        return 0, b.g.interval_ns  # contended: try again an interval later
