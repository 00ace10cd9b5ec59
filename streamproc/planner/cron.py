"""Cron: schedules fire by their expression in their IANA zone, once per tick, across DST.

Tick arithmetic is pure (:func:`due_ticks`); only :class:`CronReactor` reads a clock, and it
takes it injected. cronsim walks local wall time: on a spring-forward day a tick inside the
gap (02:30 America/New_York) fires once at the first valid time after it (03:00); on a
fall-back day a fixed-time tick fires once, at the first occurrence. Expressions with a
wildcard or step in the minute or hour field (``*/30 * * * *``) follow real elapsed time,
so they fire in both occurrences of the repeated hour, as Debian cron does.

A tick emits ``run.requested`` (trigger ``cron``) with id ``derive_id("cron", tenant,
schedule_id, fire time UTC)``: two planners, or one restarted, publish the same id (and
JetStream keeps one), and the fold remembers the latest tick fired so it never fires again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import lru_cache
from typing import ClassVar
from zoneinfo import ZoneInfo

from cronsim import CronSim

from streamproc import metrics
from streamproc.config import Settings
from streamproc.events import payloads as p
from streamproc.events.envelope import Envelope, encode, new_event
from streamproc.hlc import wall_ms
from streamproc.ids import derive_id
from streamproc.planner.projection import PlannerSchedules
from streamproc.planner.records import ScheduleView
from streamproc.planner.settings import MissedTicks, PlannerSettings
from streamproc.planner.settings import from_sections as planner_from_sections
from streamproc.runtime.reactor import Reactor, RoleContext

log = logging.getLogger(__name__)
_SCAN_LIMIT = 1000
"""Ticks stepped over at most in one search (DST oddities only ever need one or two)."""


@lru_cache(maxsize=256)
def _zone(name: str) -> ZoneInfo:
    return ZoneInfo(name)


def iso_utc(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def tick_id(tenant: str, schedule_id: str, fire_ms: int) -> str:
    """Run id (and event id) of one tick. The tenant is part of it because schedule ids are
    only unique within a tenant, and JetStream de-duplicates across the whole stream."""
    return derive_id("cron", tenant, schedule_id, iso_utc(fire_ms))


def _ms(dt: datetime) -> int:
    return round(dt.timestamp() * 1000)


def next_tick(cron: str, timezone: str, after_ms: int) -> int | None:
    """The first tick strictly after ``after_ms`` (UTC ms), or None if there is none."""
    it = CronSim(cron, datetime.fromtimestamp(after_ms // 1000, _zone(timezone)))
    for _ in range(_SCAN_LIMIT):
        try:
            t = _ms(next(it))
        except StopIteration:
            return None
        if t > after_ms:  # a fall-back hour can hand back a time before the start
            return t
    return None


def ticks_back(cron: str, timezone: str, at_or_before_ms: int, above_ms: int, n: int) -> list[int]:
    """Up to ``n`` latest ticks in ``(above_ms, at_or_before_ms]``, oldest first."""
    start = datetime.fromtimestamp(at_or_before_ms // 1000 + 1, _zone(timezone))
    it = CronSim(cron, start, reverse=True)
    out: list[int] = []
    for _ in range(_SCAN_LIMIT):
        if len(out) >= n:
            break
        try:
            t = _ms(next(it))
        except StopIteration:
            break
        if t <= above_ms:
            break
        if t <= at_or_before_ms and (not out or t < out[-1]):
            out.append(t)
    return out[::-1]


@dataclass
class TickDecision:
    fire: list[int] = field(default_factory=list)
    """Ticks to fire now (UTC ms), oldest first."""
    late: list[int] = field(default_factory=list)
    """Of ``fire``, those more than the skew tolerance late (missed, fired by policy)."""
    skipped_until: int | None = None
    """Missed ticks up to here are dropped by policy (not fired, never reconsidered)."""


def due_ticks(
    cron: str,
    timezone: str,
    anchor_ms: int,
    now_ms: int,
    policy: MissedTicks = "latest",
    grace_ms: int = 60_000,
    cap: int = 10,
) -> TickDecision:
    """Which ticks in ``(anchor_ms, now_ms]`` fire now (pure).

    A tick at most ``grace_ms`` old is on time (clock skew between planners is tolerated);
    older ones were missed (downtime) and follow ``policy``: ``latest`` fires the latest
    missed tick once, ``none`` fires none, ``all-capped`` fires each, at most ``cap`` (the
    most recent ones). An on-time tick always fires.
    """
    first = next_tick(cron, timezone, anchor_ms)
    if first is None or first > now_ms:
        return TickDecision()
    n = cap if policy == "all-capped" else 1
    recent = ticks_back(cron, timezone, now_ms, anchor_ms, n)
    if not recent:
        return TickDecision()
    latest = recent[-1]
    if policy == "none" and now_ms - latest > grace_ms:
        return TickDecision(skipped_until=latest)
    late = [t for t in recent if now_ms - t > grace_ms]
    return TickDecision(fire=recent, late=late)


def tick_event(s: ScheduleView, fire_ms: int, late: bool, policy: str, hlc: object) -> Envelope:
    tid = tick_id(s.tenant, s.id, fire_ms)
    reason = p.RunReason(
        scheduled_for=iso_utc(fire_ms),
        text=f"missed tick fired late (missed-tick policy {policy})" if late else None,
    )
    payload = p.RunRequested(
        run_id=tid,
        trigger="cron",
        schedule_id=s.id,
        mode=s.mode,
        reason=reason,
        requested_by="cron",
    )
    return new_event("run.requested", s.tenant, payload, str(hlc), event_id=tid)


class CronReactor(Reactor):
    """Fires due ticks of active schedules; the only place cron reads a clock."""

    interval: ClassVar[float | None] = 1.0

    def __init__(
        self,
        settings: Settings,
        planner: PlannerSettings | None = None,
        *,
        wall: Callable[[], int] = wall_ms,
    ) -> None:
        self.settings = settings
        self.cfg = planner or settings.configuration.built(planner_from_sections)
        self.wall = wall
        self._next: dict[tuple[str, str], tuple[tuple[int, str, str], int | None]] = {}
        self._fired: dict[tuple[str, str], int] = {}
        """Ticks published but maybe not folded back yet (or dropped by policy)."""
        self.published = 0

    async def react(self, ctx: RoleContext) -> None:
        schedules = ctx.shared.get(PlannerSchedules.name)
        if not isinstance(schedules, PlannerSchedules):
            return
        now = self.wall()
        events: list[Envelope] = []
        fired: dict[tuple[str, str], int] = {}
        live: set[tuple[str, str]] = set()
        for s in schedules.all():
            if not s.active:
                continue
            k = (s.tenant, s.id)
            live.add(k)
            anchor = max(s.active_since_ms, s.last_fired_ms or 0, self._fired.get(k, 0))
            ident = (anchor, s.cron, s.timezone)
            cached = self._next.get(k)
            if cached is None or cached[0] != ident:
                cached = (ident, next_tick(s.cron, s.timezone, anchor))
                self._next[k] = cached
            if cached[1] is None or cached[1] > now:
                continue
            d = due_ticks(
                s.cron,
                s.timezone,
                anchor,
                now,
                self.cfg.missed_ticks,
                self.cfg.clock_skew_ms,
                self.cfg.missed_ticks_cap,
            )
            if d.skipped_until is not None:
                metrics.CRON_TICKS.labels("skipped").inc()
                self._fired[k] = d.skipped_until
            for t in d.fire:
                events.append(tick_event(s, t, t in d.late, self.cfg.missed_ticks, ctx.clock.now()))
                metrics.CRON_TICKS.labels("late" if t in d.late else "fired").inc()
            if d.fire:
                fired[k] = d.fire[-1]
        for k in [k for k in self._fired if k not in live]:
            del self._fired[k]
        for k in [k for k in self._next if k not in live]:
            del self._next[k]
        if not events:
            return
        self._fired.update(fired)
        results = await ctx.publisher.publish_many_settled(
            (ctx.publisher.subject_of(e), encode(e), e.id) for e in events
        )
        for e, res in zip(events, results, strict=True):
            if isinstance(res, BaseException):
                log.warning("cron tick %s of %s not published: %s", e.id, e.tenant, res)
                metrics.PLANNER_ERRORS.labels("cron_publish").inc()
                self._fired.pop((e.tenant, e.payload.schedule_id), None)  # retry next pass
            else:
                self.published += 1
