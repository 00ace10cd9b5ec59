"""The registry of roles: which projections each folds and which reactors act on it.

Each capability defines its ``RoleSpec`` next to its code and is registered here once.
"""

from __future__ import annotations

from streamproc.audit.role import AUDITOR
from streamproc.config import Configuration
from streamproc.gateway.role import GATEWAY
from streamproc.planner.role import PLANNER, planner_spec
from streamproc.planner.settings import load as load_planner_settings
from streamproc.projection import Projection
from streamproc.projections.activity import Activity
from streamproc.reactor import RoleSpec, build
from streamproc.runner.role import RUNNER
from streamproc.scanner.role import SCANNER

ROLES: dict[str, RoleSpec] = {
    "activity": RoleSpec([Activity]),
    "gateway": GATEWAY,
    "planner": PLANNER,
    "runner": RUNNER,
    "auditor": AUDITOR,
    "scanner": SCANNER,
}
DEMO_ONLY = frozenset({"scanner"})
"""Roles ``streamproc up`` runs only with ``--demo``: the reference scanner's catalog."""


def spec_for(role: str, configuration: Configuration) -> RoleSpec:
    """The role's spec; the planner's depends on ``planner.partitions``."""
    if role == "planner":
        return planner_spec(configuration.section(load_planner_settings).partitions)
    try:
        return ROLES[role]
    except KeyError:
        raise SystemExit(f"unknown role {role!r}; roles: {', '.join(sorted(ROLES))}") from None


def projections_for(role: str, configuration: Configuration) -> list[Projection]:
    return [build(f, configuration) for f in spec_for(role, configuration).projections]
