"""Counting and logging what a committed batch did: outside the folds, which stay pure, and
only once the batch has committed (a batch that did not commit counts nothing)."""

from __future__ import annotations

import logging

from streamproc import metrics
from streamproc.runtime.projection import Folded

log = logging.getLogger("streamproc.runtime.projector")


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
