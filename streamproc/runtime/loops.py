"""What a role runs beside its projector once its state is open: its NATS services, started
when the state is current, and its reactors, after every committed batch (a singleton
role's only while it holds the lease)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from streamproc.bus.services import Served
from streamproc.cancellation import checkpoint
from streamproc.runtime.leadership import Leadership
from streamproc.runtime.projector import Projector
from streamproc.runtime.reactor import Reactor, RoleContext, RoleSpec

log = logging.getLogger(__name__)


async def serve_when_current(
    role: str,
    proj: Projector,
    ctx: RoleContext,
    start: Callable[[RoleContext], Awaitable[Served]],
    served: dict[str, Served],
) -> None:
    """Start the role's services once its state has caught up with the stream head as it was
    at start, so no instance answers from state far behind the others'. A start that fails
    (NATS unavailable) is tried again."""
    target = proj.head
    while proj.applied < target:
        checkpoint()
        with contextlib.suppress(TimeoutError):
            await proj.wait_for(target, 60)
    while True:
        checkpoint()
        try:
            served[role] = await start(ctx)
        except Exception as exc:
            log.warning("%s: cannot start its NATS services (%s); retrying", role, exc)
            await asyncio.sleep(1)
            continue
        log.info("%s: answering queries over NATS", role)
        return


async def active_react_loop(
    proj: Projector, spec: RoleSpec, ctx: RoleContext, leader: Leadership, reactors: list[Reactor]
) -> None:
    """A singleton role's reactors run only while this process holds the role's lease;
    every later term starts with fresh reactors (nothing remembered from an earlier one)."""
    while True:
        checkpoint()
        await leader.wait_active()
        try:
            await react_loop(proj, reactors, ctx, leader.active)
        finally:
            ctx.problems.clear()  # they were this term's; a standby has none of its own
            ctx.notes.clear()
            for r in reactors:
                r.end_term()
        reactors = [make(ctx.settings) for make in spec.reactors]


async def react_loop(
    proj: Projector,
    reactors: list[Reactor],
    ctx: RoleContext,
    gate: Callable[[], bool] | None = None,
) -> None:
    """Run every reactor after each committed batch, and on the shortest reactor interval;
    with a ``gate``, return as soon as it closes (it is checked before every reactor)."""
    intervals = [r.interval for r in reactors if r.interval]
    tick = min(intervals) if intervals else None
    while True:
        checkpoint()  # a reactor's NATS call can lose the stop (cancellation.py)
        await proj.next_commit(tick)
        for r in reactors:
            if gate is not None and not gate():
                return
            await r.react(ctx)
