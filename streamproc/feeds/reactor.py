"""The ``feeds`` role's one effect: every poll interval, read the OSV directory and record
what changed as Feedser exports, through the webhooks' recording path
(:func:`streamproc.recording.exports.record`), so planning, revisions, duplicates and the
audit chain treat them as a delivered export.

Runs only where the role's lease is held. Whatever goes wrong in a poll — an unreadable
directory or file, a malformed advisory, a log that does not answer — is logged with what it
concerns and the poll is tried again at the next interval; what was recorded stays recorded.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from pathlib import Path
from typing import ClassVar

from streamproc import metrics
from streamproc.config import Settings
from streamproc.feeds.ledger import SOURCE
from streamproc.feeds.plan import Plan, plan
from streamproc.feeds.queries import LedgerQueries
from streamproc.feeds.settings import FeedsSettings, from_sections
from streamproc.recording.exportlog import ExportLog
from streamproc.recording.exports import NotRecorded, Recorder, record
from streamproc.runtime.reactor import Reactor, RoleContext
from streamproc.scanner.advisories import AdvisoryDb

log = logging.getLogger(__name__)

WAIT_S = 10.0
"""How long an append waits for the role's state to reach a shard's last sequence."""
NOTE = "osv_dir"
"""The status note of a role with no directory to watch."""


class Unreadable(Exception):
    """The directory, or a KEV / EPSS / Debian sources file, could not be read."""


def load_db(cfg: FeedsSettings, skipped: dict[Path, str]) -> AdvisoryDb:
    """The advisory database of the directory (blocking I/O: run in a thread); each advisory
    file left out goes into ``skipped`` with the reason."""
    osv = cfg.path("osv_dir")
    assert osv is not None
    for name in ("kev_file", "epss_file", "debian_sources"):
        path = cfg.path(name)
        # The loaders take a missing file for an empty one: every KEV mark would then be
        # exported as gone. A file being replaced is read at the next poll instead.
        if path is not None and not path.is_file():
            raise Unreadable(f"{path} (feeds.{name}): no such file")
    try:
        with os.scandir(osv):  # glob() would take an unreadable directory for an empty one
            pass
        return AdvisoryDb.load(
            osv,
            cfg.path("kev_file"),
            cfg.path("debian_sources"),
            cfg.path("epss_file"),
            skipped=lambda path, why: skipped.__setitem__(path, why),
        )
    except (OSError, ValueError, EOFError) as exc:  # EOFError: a truncated gzip
        raise Unreadable(str(exc)) from None


class FeedsReactor(Reactor):
    interval: ClassVar[float | None] = 1.0
    """How often it looks whether a poll is due (the poll interval is a setting)."""

    def __init__(self, settings: Settings) -> None:
        self.cfg = settings.configuration.built(from_sections)
        self.due = 0.0
        """Monotonic time of the next poll."""
        self.recorder: Recorder | None = None
        self.reported: dict[Path, str] = {}
        """Files left out at the last poll, each logged once while it stays as it is."""
        self.unreadable: str | None = None
        """Why the last poll could not read its input (logged once while it stays so)."""

    async def react(self, ctx: RoleContext) -> None:
        if not self.cfg.osv_dir:
            if NOTE not in ctx.notes:
                log.info("feeds: no OSV directory set (feeds.osv_dir): recording nothing")
                ctx.notes[NOTE] = "no OSV directory set (feeds.osv_dir): recording nothing"
            return
        now = time.monotonic()
        if now < self.due:
            return
        self.due = now + self.cfg.poll_interval_s
        try:
            result = await self.poll(ctx)
        except Exception:  # a bug must not stop the role: the next poll tries again
            log.exception("feeds: poll of %s failed; trying again next poll", self.cfg.osv_dir)
            result = "failed"
        metrics.FEEDS_POLLS.labels(result).inc()

    async def poll(self, ctx: RoleContext) -> str:
        """Read the directory and record what changed: ``recorded`` (an export was new for
        a tenant), ``unchanged`` or ``failed``."""
        skipped: dict[Path, str] = {}
        try:
            db = await asyncio.to_thread(load_db, self.cfg, skipped)
        except Unreadable as exc:
            if str(exc) != self.unreadable:  # once while it stays so (a poll a minute)
                log.warning(
                    "feeds: cannot read %s (trying again every poll): %s", self.cfg.osv_dir, exc
                )
            self.unreadable = str(exc)
            return "failed"
        if self.unreadable is not None:
            log.info("feeds: %s is readable again", self.cfg.osv_dir)
            self.unreadable = None
        for path, why in skipped.items():
            if self.reported.get(path) != why:
                log.warning("feeds: %s left out: %s", path, why)
        self.reported = skipped
        queries = LedgerQueries(ctx.store)
        sent = {t: queries.sent(t) for t in self.cfg.tenants}
        # Every advisory's entry is built and hashed: off the event loop, which the gateway
        # may share (streamproc up).
        todo: Plan = await asyncio.to_thread(plan, db, sent)
        for vuln, why in todo.invalid.items():
            log.warning("feeds: advisory %s left out of exports: %s", vuln, why)
        new = 0
        for p in todo.exports:
            try:
                outs = await record(self._recorder(ctx), SOURCE, "feedser", p.body, p.tenants, None)
            except NotRecorded as exc:
                log.warning(
                    "feeds: export %s not recorded (trying again next poll): %s",
                    p.body.export_id,
                    exc.cause,
                )
                return "failed"
            recorded = [o.tenant for o in outs if o.recorded]
            if recorded:
                new += 1
                log.info(
                    "feeds: export %s (%d advisories) recorded for %s",
                    p.body.export_id,
                    len(p.body.advisories),
                    ", ".join(recorded),
                )
        return "recorded" if new else "unchanged"

    def _recorder(self, ctx: RoleContext) -> Recorder:
        if self.recorder is None:
            exports = ExportLog(
                ctx.publisher, ctx.settings.events_stream, ctx.applied, ctx.wait_for, wait_s=WAIT_S
            )
            lookup = LedgerQueries(ctx.store).export
            self.recorder = Recorder(exports, lookup, ctx.clock, ctx.publisher.prefix)
        return self.recorder
