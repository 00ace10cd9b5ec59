"""Roles: which projections a role folds and which reactors act on what it has folded.

A projection is pure state; a reactor is the part of a role that has effects — it runs after
each committed batch (and on its own interval) with the committed state, the process's clock
and a publisher, and emits derived events whose ids come from their cause, so a crash and redo
emits nothing twice. Replay runs projections only, never reactors.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import ClassVar

from streamproc.bus.publisher import Publisher
from streamproc.config import Settings
from streamproc.hlc import HybridLogicalClock
from streamproc.projection import Projection
from streamproc.projections.activity import Activity
from streamproc.state.store import Store


@dataclass
class RoleContext:
    role: str
    settings: Settings
    store: Store
    publisher: Publisher
    clock: HybridLogicalClock
    applied: Callable[[], int]
    """The last stream sequence committed to ``store``."""


class Reactor(ABC):
    interval: ClassVar[float | None] = None
    """Seconds between timer-driven runs, besides the run after every committed batch."""

    @abstractmethod
    async def react(self, ctx: RoleContext) -> None: ...


@dataclass
class RoleSpec:
    projections: list[Callable[[], Projection]]
    reactors: list[Callable[[Settings], Reactor]] = field(default_factory=list)


ROLES: dict[str, RoleSpec] = {
    "activity": RoleSpec([Activity]),
}


def spec_for(role: str) -> RoleSpec:
    try:
        return ROLES[role]
    except KeyError:
        raise SystemExit(f"unknown role {role!r}; roles: {', '.join(sorted(ROLES))}") from None


def projections_for(role: str) -> list[Projection]:
    return [f() for f in spec_for(role).projections]
