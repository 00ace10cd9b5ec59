"""Warming the impact index in the background after a restart: the projection's slices
(:meth:`~streamproc.impact.projection.ImpactProjection.warm_slice`) run in a task that
yields to the event loop between them, so folding and queries go on meanwhile.

Kept out of :mod:`streamproc.impact.projection` so that module stays a pure fold (no event
loop); the planner's role starts it once its projections are open
(``RoleSpec.on_open``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping

from streamproc.impact.projection import ImpactProjection, impact_projection

log = logging.getLogger(__name__)

WARM_SLICE = 400
"""Groups loaded per warming slice (~5-10 ms) before yielding to the event loop."""

_running: set[asyncio.Task[None]] = set()
"""The tasks warming now: the event loop keeps only weak references to its tasks."""


async def warm_up(proj: ImpactProjection, slice_groups: int = WARM_SLICE) -> None:
    """Load hot bitmaps from committed state in slices, yielding between them."""
    try:
        while not proj.warm_slice(slice_groups):
            await asyncio.sleep(0)
    except (KeyError, RuntimeError, AttributeError) as exc:  # store closed under us
        log.debug("impact warming stopped: %s", exc)


def start_warming(proj: ImpactProjection) -> asyncio.Task[None] | None:
    """Warm ``proj`` in a background task if it is not warm yet (opened on a non-empty
    index with warm-on-start). None when there is nothing to warm, or no running loop
    (then a caller warms explicitly, :meth:`ImpactProjection.warm_now`)."""
    if proj.warm:
        return None
    with contextlib.suppress(RuntimeError):  # no running loop: warm explicitly
        task = asyncio.get_running_loop().create_task(warm_up(proj), name="impact-warm")
        _running.add(task)
        task.add_done_callback(_running.discard)
        return task
    return None


def warm_hosted(shared: Mapping[str, object]) -> None:
    """Start warming the ``impact`` projection among a process's projections (the
    planner's ``RoleSpec.on_open``)."""
    start_warming(impact_projection(shared))
