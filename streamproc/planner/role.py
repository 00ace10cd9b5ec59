"""The ``planner`` role: its projections and its two reactors (planning and cron).

Register in :mod:`streamproc.roles` as ``"planner": PLANNER``. The planner also needs the
``impact`` projection in the same process (it reads ``RoleContext.shared["impact"]``): once
``streamproc.impact.projection.ImpactProjection`` exists, compose the role as
``RoleSpec([ImpactProjection, *PLANNER_PROJECTIONS], PLANNER_REACTORS)`` — which is what
:data:`PLANNER` does by itself when that module is importable. Without it the reactors wait
(and say so once) rather than plan against nothing.
"""

from __future__ import annotations

from collections.abc import Callable

from streamproc.config import Settings
from streamproc.planner.cron import CronReactor
from streamproc.planner.exports import PlannerExports
from streamproc.planner.projection import LastReports, PlannerRuns, PlannerSchedules
from streamproc.planner.reactor import PlannerReactor
from streamproc.projection import Projection
from streamproc.reactor import Reactor, RoleSpec

PLANNER_PROJECTIONS: list[Callable[[], Projection]] = [
    PlannerSchedules,
    PlannerExports,
    PlannerRuns,
    LastReports,
]
PLANNER_REACTORS: list[Callable[[Settings], Reactor]] = [PlannerReactor, CronReactor]


def _impact() -> list[Callable[[], Projection]]:
    try:
        from streamproc.impact.projection import ImpactProjection  # type: ignore[import-not-found]
    except ImportError:
        return []
    return [ImpactProjection]


PLANNER = RoleSpec([*_impact(), *PLANNER_PROJECTIONS], PLANNER_REACTORS)
