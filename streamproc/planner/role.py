"""The ``planner`` role: its projections and its three reactors (planning, cron, and the
SBOM store's retention, :mod:`streamproc.sboms`).

The planner hosts the ``impact`` projection itself and reads it from ``RoleContext.shared``
(:func:`~streamproc.impact.projection.impact_projection`); other roles ask it for impact
previews over NATS.
"""

from __future__ import annotations

from collections.abc import Callable

from streamproc.config import Settings
from streamproc.impact.settings import configured_projection
from streamproc.impact.warming import warm_hosted
from streamproc.planner.cron import CronReactor
from streamproc.planner.exports import PlannerExports
from streamproc.planner.open_runs import PlannerOpenRuns
from streamproc.planner.partitions import run as run_partitions
from streamproc.planner.projection import LastReports, PlannerRuns, PlannerSchedules
from streamproc.planner.reactor import PlannerReactor
from streamproc.planner.service import start as start_service
from streamproc.runtime.projection import Projection
from streamproc.runtime.reactor import Configured, Reactor, RoleSpec
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
    [Configured(configured_projection), *PLANNER_PROJECTIONS],
    PLANNER_REACTORS,
    singleton=True,
    services=start_service,
    on_open=warm_hosted,
)
"""One active planner (the lease holder); others fold and stand by. All of them warm the
impact index once it is open and answer impact previews over NATS
(:mod:`streamproc.planner.service`)."""


PARTITIONED_PLANNER = RoleSpec(
    [SbomRefs],
    [SbomRetention],
    singleton=True,
    background=[run_partitions],
)
"""``planner.partitions`` > 1: each instance holds its share of the tenant partitions
(:mod:`streamproc.planner.partitions`), each with its own index, state and previews; the
role's own state is the SBOM references, and its lease the SBOM store's retention, which
spans tenants (an SBOM is stored once by digest)."""


def planner_spec(partitions: int) -> RoleSpec:
    """The planner role for ``planner.partitions``: 1 is :data:`PLANNER`, unchanged."""
    return PLANNER if partitions <= 1 else PARTITIONED_PLANNER
