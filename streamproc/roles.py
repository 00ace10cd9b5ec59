"""Which projections each role hosts. Later capabilities add their projections here."""

from __future__ import annotations

from collections.abc import Callable

from streamproc.projection import Projection
from streamproc.projections.activity import Activity

ROLES: dict[str, list[Callable[[], Projection]]] = {
    "activity": [Activity],
}


def projections_for(role: str) -> list[Projection]:
    try:
        factories = ROLES[role]
    except KeyError:
        raise SystemExit(f"unknown role {role!r}; roles: {', '.join(sorted(ROLES))}") from None
    return [f() for f in factories]
