"""Restart check: re-enqueue the work items of recently planned runs.

A planner publishes ``run.planned``, then the segment events, then the work items. If it
dies after ``run.planned`` is in the log, its marker stops any replan — so the segments or
work items cut short would be lost. Once after a start (when caught up), for every run
planned within the recovery window, the planner fetches each segment event from the event
log by its subject and publishes those bytes to the work queue again with the same
``Nats-Msg-Id``: JetStream drops every copy it already has (the window stays inside the
work stream's duplicate window). A segment event missing from the log is re-derived by
planning the run again; if that plan no longer matches the recorded one (the index changed
in between) the run is reported, not guessed at.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Callable

from streamproc import metrics
from streamproc.bus import jsapi
from streamproc.bus.publisher import Publisher
from streamproc.events.catalog import aggregate_subject
from streamproc.events.envelope import Envelope, decode, encode
from streamproc.planner.emit import PlanEvents, work_subject
from streamproc.planner.model import Plan
from streamproc.planner.records import RunRecord

log = logging.getLogger(__name__)
NO_MESSAGE = 10037


async def last_on_subject(pub: Publisher, stream: str, subject: str) -> bytes | None:
    try:
        doc = await jsapi.request(pub.nc, f"STREAM.MSG.GET.{stream}", {"last_by_subj": subject})
    except jsapi.JsApiError as exc:
        if exc.err_code == NO_MESSAGE or exc.code == 404:
            return None
        raise
    return base64.b64decode(doc["message"].get("data") or b"")


async def reenqueue(
    pub: Publisher,
    stream: str,
    rec: RunRecord,
    replan: Callable[[RunRecord], tuple[Plan, PlanEvents] | None],
) -> int:
    """Publish the run's work items again from the log (or a matching replan); returns how
    many work items were sent (JetStream de-duplicates the ones it already holds)."""
    prefix = pub.prefix
    found: list[tuple[Envelope, bytes]] = []
    missing: set[str] = set()
    for ref in rec.segments:
        subject = aggregate_subject(prefix, rec.tenant, "segment", ref.segment_id)
        raw = await last_on_subject(pub, stream, subject)
        if raw is None:
            missing.add(ref.segment_id)
        else:
            found.append((decode(raw), raw))
    if missing:
        again = replan(rec)
        want = [(s.segment_id, s.images) for s in rec.segments]
        if again is None or [(s.segment_id, len(s.digests)) for s in again[0].segments] != want:
            log.error(
                "planner: run %s of %s lost %d segment(s) in a crash and its plan has changed "
                "since; cancel it and request it again",
                rec.run_id,
                rec.tenant,
                len(missing),
            )
            metrics.PLANNER_ERRORS.labels("unrecoverable_segments").inc()
        else:
            lost = [e for e in again[1].segments if e.id in missing]
            await pub.publish_events(lost)
            found.extend((e, encode(e)) for e in lost)
    items = [(work_subject(prefix, e.tenant, e.payload.priority), raw, e.id) for e, raw in found]
    await pub.publish_many(items)
    return len(items)
