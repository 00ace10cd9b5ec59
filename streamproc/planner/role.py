"""The ``planner`` role: its projections and its three reactors (planning, cron, and the
SBOM store's retention, :mod:`streamproc.sboms`).

The planner hosts the ``impact`` projection itself and reads it as
``RoleContext.shared["impact"]``; other roles ask it for impact previews over NATS.
"""

from __future__ import annotations

from collections.abc import Callable

from streamproc.config import Settings
from streamproc.impact.projection import ImpactProjection
from streamproc.planner.cron import CronReactor
from streamproc.planner.exports import PlannerExports
from streamproc.planner.open_runs import PlannerOpenRuns
from streamproc.planner.projection import LastReports, PlannerRuns, PlannerSchedules
from streamproc.planner.reactor import PlannerReactor
from streamproc.planner.service import start as start_service
from streamproc.projection import Projection
from streamproc.reactor import Reactor, RoleSpec
from streamproc.sboms.refs import SbomRefs
from streamproc.sboms.retention import SbomRetention

PLANNER_PROJECTIONS: list[Callable[[], Projection]] = [
    PlannerSchedules,
    PlannerExports,
    PlannerRuns,
    LastReports,
    PlannerOpenRuns,
    SbomRefs,
]
PLANNER_REACTORS: list[Callable[[Settings], Reactor]] = [PlannerReactor, CronReactor, SbomRetention]


PLANNER = RoleSpec(
    [ImpactProjection, *PLANNER_PROJECTIONS],
    PLANNER_REACTORS,
    singleton=True,
    services=start_service,
)
"""One active planner (the lease holder); others fold and stand by. All of them answer
impact previews over NATS (:mod:`streamproc.planner.service`)."""
