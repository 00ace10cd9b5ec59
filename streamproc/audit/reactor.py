"""The auditor's effects: signed batch snapshots, clock-skew holds, periodic verification.

After each committed batch (and on a one-second tick) it looks at every tenant's head: every
``batch_size`` unsnapshotted entries, or after ``batch_interval`` with at least one waiting,
it signs a snapshot of the next range and publishes it as an ``audit.snapshot`` event whose
id is derived from (tenant, to_chain_link). The snapshot is recorded when the projection folds
that event back, so a replay (projections only) re-folds the recorded snapshots and signs
nothing anew. A range never extends past a held entry (one too far ahead of the clock).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import threading
import time
from collections.abc import Callable
from typing import ClassVar

from streamproc import metrics
from streamproc.audit.dsse import Keyring, Signer
from streamproc.audit.entry import Entry
from streamproc.audit.held import held_positions
from streamproc.audit.layout import HEADS_CF, Readable, head_decoder, iter_entries
from streamproc.audit.settings import AuditSettings
from streamproc.audit.settings import from_sections as audit_from_sections
from streamproc.audit.signing import build_keyring, load_signer, public_key_line
from streamproc.audit.snapshots import max_hlc, snapshot_event
from streamproc.audit.verify import verify_all
from streamproc.bus.publisher import NoStream, PublishError, PublishTimeout
from streamproc.config import Settings
from streamproc.hlc import ClockSkewError, wall_ms
from streamproc.queries import ChainReport
from streamproc.runtime.reactor import Reactor, RoleContext
from streamproc.state.store import RocksStore, Store

log = logging.getLogger(__name__)

PENDING_TIMEOUT_S = 30.0
"""A published snapshot not folded back within this long is assumed lost and planned again
(with the same id when the range is the same, so a late original is de-duplicated)."""


class SnapshotReactor(Reactor):
    interval: ClassVar[float | None] = 1.0

    def __init__(
        self,
        settings: Settings,
        audit: AuditSettings | None = None,
        *,
        signer: Signer | None = None,
        keyring: Keyring | None = None,
        wall: Callable[[], int] = wall_ms,
        min_gap_s: float = 0.2,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self.audit = audit or audit_from_sections(settings, settings.configuration.sections)
        self.signer = signer or load_signer(
            settings.data_dir, env=settings.configuration.values, generate=True
        )
        self.keyring = keyring or build_keyring(
            settings.data_dir, env=settings.configuration.values
        )
        if self.signer.key_id not in self.keyring:
            self.keyring.add(self.signer.key_id, self.signer.signing_key.verify_key)
        self.wall = wall
        self.monotonic = monotonic
        """The clock of the verification period and the batch timers (a test drives it)."""
        self.min_gap_s = min_gap_s
        self.broken: dict[str, str] = {}
        """Tenants whose last verification failed: nothing more is signed for them."""
        self.published = 0
        self._verified_at: float | None = None
        self._pending: dict[str, tuple[int, float]] = {}
        self._waiting_since: dict[str, float] = {}
        self._counted_held: set[tuple[str, int]] = set()
        self._last_plan = float("-inf")
        log.info("auditor signs snapshots as %s", public_key_line(self.signer))

    async def react(self, ctx: RoleContext) -> None:
        now = self.monotonic()
        if self._verified_at is None:
            self._verified_at = now
            if self.audit.verify_on_start:
                await self.verify(ctx, "start-up")
        elif self.audit.verify_period_s and now - self._verified_at >= self.audit.verify_period_s:
            self._verified_at = now
            await self.verify(ctx, "periodic")
        if now - self._last_plan >= self.min_gap_s:
            self._last_plan = now
            await self.snapshot(ctx)

    # ------------------------------------------------------------------ verification

    async def verify(self, ctx: RoleContext, why: str) -> list[ChainReport]:
        """Verify every chain off the event loop, on a point-in-time read-only view."""
        stop = threading.Event()
        keyring = self.keyring
        store = ctx.store

        def work() -> list[ChainReport]:
            if isinstance(store, RocksStore):
                view = RocksStore(store.path, read_only=True, sizes=store.sizes)
                try:
                    return verify_all(view, keyring, stop=stop)
                finally:
                    view.close()
            return verify_all(store, keyring, stop=stop)

        t0 = time.perf_counter()
        try:
            reports = await asyncio.to_thread(work)
        except asyncio.CancelledError:
            stop.set()
            raise
        for r in reports:
            if r.ok:
                self.broken.pop(r.tenant, None)
            else:
                self.broken[r.tenant] = r.reason
                log.error(
                    "audit chain of tenant %s is BROKEN (%s verification): %s; no further "
                    "snapshots are signed for it",
                    r.tenant,
                    why,
                    r.reason,
                )
        log.info(
            "%s verification of %d audit chain(s), %d entries: %d failed (%.1f s)",
            why,
            len(reports),
            sum(r.entries for r in reports),
            sum(not r.ok for r in reports),
            time.perf_counter() - t0,
        )
        return reports

    # ------------------------------------------------------------------ snapshots

    def plan(self, store: Readable, now_ms: int, mono: float) -> list[tuple[str, list[Entry]]]:
        """The batches to sign now, read in one synchronous pass (a consistent view)."""
        plans: list[tuple[str, list[Entry]]] = []
        size = self.audit.batch_size
        for key, raw in store.scan(HEADS_CF):
            tenant = key.decode()
            head = head_decoder.decode(raw)
            frontier = head.snapshotted
            pending = self._pending.get(tenant)
            if pending is not None:
                if pending[0] <= frontier or mono > pending[1]:
                    del self._pending[tenant]
                else:
                    frontier = pending[0]
            if frontier >= head.entries:
                self._waiting_since.pop(tenant, None)
                continue
            if tenant in self.broken:
                continue
            limit = head.entries
            held = held_positions(store, tenant, frontier, now_ms, self.audit.max_clock_skew_ms)
            if held:
                self._count_held(tenant, held, now_ms)
                limit = held[0][0]
            since = self._waiting_since.setdefault(tenant, mono)
            ranges: list[tuple[int, int]] = []
            while limit - frontier >= size:
                ranges.append((frontier, frontier + size))
                frontier += size
            if limit > frontier and mono - since >= self.audit.batch_interval_s:
                ranges.append((frontier, limit))
            for start, end in ranges:
                batch = list(itertools.islice(iter_entries(store, tenant, start), end - start))
                if len(batch) == end - start:
                    plans.append((tenant, batch))
        return plans

    def _count_held(self, tenant: str, held: list[tuple[int, str]], now_ms: int) -> None:
        for position, t_hlc in held:
            if (tenant, position) in self._counted_held:
                continue
            self._counted_held.add((tenant, position))
            metrics.HLC_SKEW_REJECTIONS.inc()
            ahead = int(t_hlc.split(":", 1)[0]) - now_ms
            log.warning(
                "tenant %s: audit entry %d (HLC %s) is %d ms ahead of the auditor's clock "
                "(max %d ms); held: not snapshotted, with everything after it, until the "
                "clock catches up (see `streamproc chain held --tenant %s`)",
                tenant,
                position,
                t_hlc,
                ahead,
                self.audit.max_clock_skew_ms,
                tenant,
            )

    async def snapshot(self, ctx: RoleContext) -> int:
        """Sign and publish every due batch; returns how many were newly stored."""
        mono = self.monotonic()
        stored = 0
        skip: set[str] = set()
        for tenant, batch in self.plan(ctx.store, self.wall(), mono):
            if tenant in skip:
                continue
            try:
                ts = ctx.clock.receive(max_hlc(batch))
            except ClockSkewError as exc:
                log.warning("tenant %s: snapshot postponed: %s", tenant, exc)
                skip.add(tenant)
                continue
            event = snapshot_event(tenant, batch, ts, self.signer)
            try:
                ack = await ctx.publisher.publish_event(event)
            except (PublishError, PublishTimeout, NoStream) as exc:
                log.warning("tenant %s: snapshot not published (retried later): %s", tenant, exc)
                skip.add(tenant)
                continue
            self._pending[tenant] = (batch[-1].position + 1, mono + PENDING_TIMEOUT_S)
            self._waiting_since[tenant] = mono
            if not ack.duplicate:
                stored += 1
                self.published += 1
                metrics.BATCH_SNAPSHOTS.labels(tenant).inc()
        self._prune_held(ctx.store)
        return stored

    def _prune_held(self, store: Store) -> None:
        if not self._counted_held:
            return
        keep = set()
        for tenant, position in self._counted_held:
            raw = store.get(HEADS_CF, tenant.encode())
            if raw is not None and position >= head_decoder.decode(raw).snapshotted:
                keep.add((tenant, position))
        self._counted_held = keep
