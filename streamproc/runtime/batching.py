"""How many events the next batch folds: ``projector.batch`` at most, fewer while batches
take longer than ``projector.batch_max_s``.

A batch is folded and committed in one go on the process's event loop, so while it runs
nothing else of the process does: no lease renewal (a role's lease lapses after its TTL),
no NATS service answer, no other role's fold. A backlog of costly events (a bulk import of
400-component SBOMs costs the planner's impact index ~5 ms an image) made a 1,000-event
batch take 5 s and more. The size follows the measured cost per event instead: after each
batch, as many events as fit in the time, at most twice the last size (the cost per event
varies, and a small batch costs more per event than a large one, so the size climbs back
step by step rather than jumping to what the last batch's rate promises). A start is one
of those steps too: the first batch is small, since its cost is unknown.
"""

from __future__ import annotations

from streamproc.configfile.sections import Sections

__all__ = ["FIRST_BATCH", "HEADROOM", "BatchSizer", "batch_time_from"]

FIRST_BATCH = 16
"""Events of the first batch: what its unknown cost may take."""
HEADROOM = 0.8
"""The share of the time a batch is sized to: its cost per event is last batch's."""


class BatchSizer:
    """The next batch's size, from the sizes and times of the ones before (pure)."""

    __slots__ = ("limit", "max_s", "size")

    def __init__(self, limit: int, max_s: float | None) -> None:
        """``limit``: ``projector.batch``. ``max_s``: ``projector.batch_max_s``; None: no
        bound on the time, every batch up to ``limit`` (a rebuild, which serves nothing
        while it folds)."""
        self.limit = limit
        self.max_s = max_s
        self.size = limit if max_s is None else min(limit, FIRST_BATCH)

    def observe(self, events: int, seconds: float) -> None:
        """A batch of ``events`` took ``seconds`` to fold and commit."""
        if self.max_s is None or events <= 0:
            return
        budget = HEADROOM * self.max_s * events  # event-seconds: fits = budget / seconds
        fits = self.limit if seconds * self.limit <= budget else int(budget / seconds)
        if events < self.size and fits >= self.size:
            return  # a batch of what had arrived, within the time: says nothing about more
        self.size = max(1, min(self.limit, fits, 2 * self.size))


def batch_time_from(sections: Sections) -> float:
    """``projector.batch_max_s``, and at most a tenth of ``lease.ttl_s``: a renewal's request
    times out after a third of the TTL (:func:`streamproc.runtime.lease.call_timeout`),
    measured on the event loop, and its reply can wait for two batches in a row (the one
    being folded when it is sent, and the one its reply arrives during)."""
    return min(sections.projector.batch_max_s, sections.lease.ttl_s / 10)
