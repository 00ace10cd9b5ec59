"""Deleting stored SBOMs that no image uses any more, ``sboms.retention_s`` after the last
image using one went.

A reactor of the planner role, so it runs only in the process holding the planner's lease;
a standby folds the same references (:mod:`streamproc.sboms.refs`) and deletes nothing
until it takes the lease over. Each pass:

- takes the releases the fold recorded at least the retention ago, oldest first, and for
  each reads the object's description in the SBOM store. An SBOM stored again since (a
  gateway's PUT of the same document, whose ``image.indexed`` the planner has not folded
  yet) has a newer description: it keeps the object for another retention from then. Else
  the object is deleted *on the condition that its description is still the one read*
  (:func:`streamproc.bus.objects.delete_if_unchanged`), so a store that races the deletion
  either wins (nothing is deleted) or comes after it (and writes the object anew);
- then publishes ``sbom.deleted``, id ``derive_id(release, "sbom.deleted", name)``, which ends
  the release in the fold. A crash between the two redoes the pass: the object is already
  gone, the same event is published again and JetStream de-duplicates it.

Once an hour (and when the term starts), with the fold caught up with the log, it also
deletes objects that no folded event ever named and that were stored at least the retention
ago: an SBOM a client stored and then never published the image for.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import ClassVar

from streamproc import metrics
from streamproc.bus import objects
from streamproc.bus.jsapi import JsApiError
from streamproc.config import Configuration, Settings
from streamproc.configfile.sections import Sections
from streamproc.events.envelope import new_event
from streamproc.events.payloads import SbomDeleted
from streamproc.hlc import wall_ms
from streamproc.ids import derive_id
from streamproc.names import sbom_bucket
from streamproc.runtime.lease import NatsFailure
from streamproc.runtime.reactor import Reactor, RoleContext
from streamproc.sboms.refs import known, released_before

log = logging.getLogger(__name__)

SWEEP_S = 3600.0
"""Seconds between sweeps for objects no folded event names."""
MIN_PASS_MS = 1000
"""A pass after every committed batch, but at most one a second."""
PROBLEM = "sbom_retention"
"""The role problem a failing pass sets (``streamproc status``, ``/readyz``)."""


def retention_from(sections: Sections) -> float:
    """``sboms.retention_s``: seconds an SBOM no image uses is kept (at least 1, checked at
    start)."""
    return sections.sboms.retention_s


def load_retention(env: Mapping[str, str]) -> float:
    """:func:`retention_from` the text of ``env``, decoded as at start (tests)."""
    return retention_from(Configuration(values=env).sections)


def _ms(t: datetime) -> int:
    return int(t.timestamp() * 1000)


class SbomRetention(Reactor):
    interval: ClassVar[float | None] = 5.0

    def __init__(
        self,
        settings: Settings,
        retention_s: float | None = None,
        *,
        wall: Callable[[], int] = wall_ms,
        sweep_s: float = SWEEP_S,
    ) -> None:
        self.settings = settings
        if retention_s is None:
            retention_s = settings.configuration.built(retention_from)
        self.retention_ms = int(retention_s * 1000)
        self.wall = wall
        self.sweep_s = sweep_s
        self._not_before: dict[str, int] = {}
        """Released SBOMs not to look at again before this time (ms): stored again since,
        or just deleted (their ``sbom.deleted`` not folded yet)."""
        self._last_pass = 0
        self._next_sweep = 0.0

    async def react(self, ctx: RoleContext) -> None:
        now = self.wall()
        if now - self._last_pass < MIN_PASS_MS:
            return
        self._last_pass = now
        bucket = sbom_bucket(ctx.settings.prefix)
        try:
            await self._released(ctx, bucket, now)
            if time.monotonic() >= self._next_sweep and ctx.lag() == 0:
                await self._sweep(ctx, bucket, now)
                self._next_sweep = time.monotonic() + self.sweep_s
        except (JsApiError, objects.ObjectError, *NatsFailure) as exc:
            metrics.PLANNER_ERRORS.labels(PROBLEM).inc()
            ctx.problems[PROBLEM] = (
                f"SBOM retention: the SBOM store {bucket} did not answer ({exc}); "
                "`streamproc streams apply` creates it"
            )[:500]
            log.warning("SBOM retention pass failed: %s", exc)
            return
        ctx.problems.pop(PROBLEM, None)

    async def _released(self, ctx: RoleContext, bucket: str, now: int) -> None:
        nc = ctx.publisher.nc
        self._not_before = {k: v for k, v in self._not_before.items() if v > now}
        for name, rel in list(released_before(ctx.store, now - self.retention_ms)):
            if name in self._not_before:
                continue
            meta = await objects.meta(nc, bucket, name)
            if meta is not None and not meta.deleted:
                stored = _ms(meta.time)
                if stored + self.retention_ms > now:  # stored again since it was released
                    self._not_before[name] = stored + self.retention_ms
                    continue
                if not await objects.delete_if_unchanged(nc, bucket, meta):
                    continue  # stored again while we looked: the next pass reads it anew
                metrics.SBOMS_DELETED.labels("released").inc()
                log.info("SBOM %s deleted: no image has used it since %s", name, rel.at)
            event = new_event(
                "sbom.deleted",
                rel.tenant,
                SbomDeleted(sbom=name, released_by=rel.by),
                str(ctx.clock.now()),
                event_id=derive_id(rel.by, "sbom.deleted", name),
            )
            await ctx.publisher.publish_event(event)
            self._not_before[name] = now + 10 * MIN_PASS_MS

    async def _sweep(self, ctx: RoleContext, bucket: str, now: int) -> None:
        nc = ctx.publisher.nc
        for meta in await objects.listing(nc, bucket):
            if meta.deleted or not meta.name.startswith("sha256:") or known(ctx.store, meta.name):
                continue
            if _ms(meta.time) + self.retention_ms > now:
                continue
            if await objects.delete_if_unchanged(nc, bucket, meta):
                metrics.SBOMS_DELETED.labels("unreferenced").inc()
                log.info("SBOM %s deleted: stored but never named by an indexed image", meta.name)
