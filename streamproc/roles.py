"""The registry of roles: which projections each folds and which reactors act on it, and
running roles by name with the runtime (:mod:`streamproc.runtime.app`).

Each capability defines its ``RoleSpec`` next to its code and is registered here once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import partial
from pathlib import Path

from streamproc.audit.role import AUDITOR
from streamproc.bus.fastclient import FastClient
from streamproc.config import Configuration, Settings
from streamproc.feeds.role import FEEDS
from streamproc.gateway.role import GATEWAY
from streamproc.natsd.owner import StoreLock
from streamproc.planner.role import PLANNER, planner_spec
from streamproc.planner.settings import from_sections as planner_from_sections
from streamproc.projections.activity import Activity
from streamproc.runner.role import RUNNER
from streamproc.runtime import app, replay
from streamproc.runtime.projection import Projection
from streamproc.runtime.reactor import RoleSpec, build
from streamproc.scanner.role import SCANNER
from streamproc.status import StatusHeartbeat

ROLES: dict[str, RoleSpec] = {
    "activity": RoleSpec([Activity]),
    "gateway": GATEWAY,
    "planner": PLANNER,
    "runner": RUNNER,
    "auditor": AUDITOR,
    "scanner": SCANNER,
    "feeds": FEEDS,
}
DEMO_ONLY = frozenset({"scanner"})
"""Roles ``streamproc up`` runs only with ``--demo``: the reference scanner's catalog."""


def heartbeat(system: app.System) -> StatusHeartbeat:
    """What announces a running system in the status bucket (``streamproc status``)."""
    return StatusHeartbeat(system, lag_limit=app.READY_LAG)


def spec_for(role: str, configuration: Configuration) -> RoleSpec:
    """The role's spec; the planner's depends on ``planner.partitions``."""
    if role == "planner":
        return planner_spec(configuration.built(planner_from_sections).partitions)
    try:
        return ROLES[role]
    except KeyError:
        raise SystemExit(f"unknown role {role!r}; roles: {', '.join(sorted(ROLES))}") from None


def projections_for(role: str, configuration: Configuration) -> list[Projection]:
    return [build(f, configuration) for f in spec_for(role, configuration).projections]


def specs_for(
    roles: Sequence[str],
    configuration: Configuration,
    specs: Mapping[str, RoleSpec] | None = None,
) -> dict[str, RoleSpec]:
    """Each role's spec: from ``specs`` if set up otherwise than the registry's (a role
    process's command-line options), else the registry's."""
    return {r: (specs or {}).get(r) or spec_for(r, configuration) for r in roles}


class System(app.System):
    """The runtime's system of the named roles, announced in the status bucket."""

    def __init__(
        self,
        settings: Settings,
        roles: Sequence[str],
        *,
        http: bool = True,
        store_lock: StoreLock | None = None,
        specs: Mapping[str, RoleSpec] | None = None,
    ) -> None:
        """``specs``: roles set up otherwise than the registry's (see :func:`specs_for`)."""
        super().__init__(
            settings,
            specs_for(roles, settings.configuration, specs),
            http=http,
            store_lock=store_lock,
            heartbeat=heartbeat,
        )


async def run_roles(
    settings: Settings,
    roles: Sequence[str],
    *,
    http: bool = True,
    specs: Mapping[str, RoleSpec] | None = None,
    extra: app.Extra | None = None,
) -> int:
    """:func:`streamproc.runtime.app.run_roles` for the named roles."""
    return await app.run_roles(
        settings,
        specs_for(roles, settings.configuration, specs),
        http=http,
        heartbeat=heartbeat,
        extra=extra,
    )


async def rebuild(
    nc: FastClient,
    stream: str,
    role: str,
    target: Path,
    *,
    batch: int = 2000,
    progress: bool = True,
    allow_partial: bool = False,
    configuration: Configuration,
) -> replay.ReplaySummary:
    """:func:`streamproc.runtime.replay.rebuild` with the role's projections."""
    return await replay.rebuild(
        nc,
        stream,
        role,
        partial(projections_for, role, configuration),
        target,
        batch=batch,
        progress=progress,
        allow_partial=allow_partial,
        configuration=configuration,
    )
