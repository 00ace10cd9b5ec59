"""Reactors: the part of a role that has effects.

A projection is pure state; a reactor runs after each committed batch (and on its own
interval) with the committed state, the process's clock and a publisher, and emits derived
events whose ids come from their cause, so a crash and redo emits nothing twice. Replay runs
projections only, never reactors.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, ClassVar

from aiohttp import web

from streamproc.bus.publisher import Publisher
from streamproc.bus.services import Served
from streamproc.config import Configuration, Settings
from streamproc.hlc import HybridLogicalClock
from streamproc.runtime.projection import Projection
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
    wait_for: Callable[[int, float], Awaitable[None]]
    """``await wait_for(seq, timeout)``: until ``store`` reflects stream sequence ``seq``."""
    lag: Callable[[], int]
    """Events between the stream head (as last seen) and ``applied``."""
    shared: dict[str, Projection] = field(default_factory=dict)
    """Every projection hosted in this process, by name, for the reactors and services of
    the roles here (one instance per name). Another role's state is asked for over NATS
    (:mod:`streamproc.bus.services`), never read from here."""
    problems: dict[str, str] = field(default_factory=dict)
    """Conditions a reactor reports until they clear (name → what is wrong): while any is
    set the process answers ``/readyz`` with 503 and ``streamproc status`` shows the role
    degraded."""
    notes: dict[str, str] = field(default_factory=dict)
    """What a reactor says about how it runs, not wrong (name → text): shown by
    ``streamproc status`` beside the instance, with no effect on its health (the ``feeds``
    role with no directory to watch)."""
    folded_stream: str = ""
    """The stream ``store`` is folded from, when it is not the event log (a planner
    partition's, :mod:`streamproc.planner.partitions`): ``applied`` counts in its sequences."""
    folded_head: Callable[[], Awaitable[int]] | None = None
    """With ``folded_stream``: the sequence this state must reach to be current now."""


class Reactor(ABC):
    interval: ClassVar[float | None] = None
    """Seconds between timer-driven runs, besides the run after every committed batch."""

    @abstractmethod
    async def react(self, ctx: RoleContext) -> None: ...

    def end_term(self) -> None:  # noqa: B027 - optional hook
        """This process stopped acting for a role behind a lease (the lease is lost, or the
        process stops): undo what only the active instance may report (its gauges)."""


@dataclass(frozen=True)
class Configured:
    """A projection factory that takes its settings from the process's configuration (the
    impact index's cache bound, the read model's retention); other factories take none."""

    make: Callable[[Configuration], Projection]


def build(make: Callable[[], Projection] | Configured, configuration: Configuration) -> Projection:
    """One projection of a role, as its factory makes it in this process."""
    return make.make(configuration) if isinstance(make, Configured) else make()


@dataclass
class RoleSpec:
    projections: list[Callable[[], Projection] | Configured]
    reactors: list[Callable[[Settings], Reactor]] = field(default_factory=list)
    routes: Callable[[web.Application, RoleContext], None] | None = None
    """Adds the role's HTTP routes to the process's aiohttp application."""
    services: Callable[[RoleContext], Awaitable[Served]] | None = None
    """Starts the NATS services answering questions about the role's state
    (:mod:`streamproc.bus.services`); every instance serves, standbys too, once its
    projections have caught up with the stream head as it was at start."""
    singleton: bool = False
    """Its reactors must act in one process at a time: they run only where the role's lease
    is held (:mod:`streamproc.runtime.leadership`); other instances fold and stand by."""
    background: list[Callable[[RoleContext], Coroutine[Any, Any, None]]] = field(
        default_factory=list
    )
    """The role's long-running services (the runner's segment workers): each coroutine is
    started with the role, on every instance, and cancelled when the process stops (it
    cleans up as it unwinds); one that ends with an error stops the process."""
    on_open: Callable[[dict[str, Projection]], None] | None = None
    """Called with the process's projections by name (``RoleContext.shared``) once the
    role's projector has started, in the running loop, on every instance: starts background
    work over the opened state that must not wait for catching up (the impact index's
    warming, :mod:`streamproc.impact.warming`)."""
