"""A planner process that SIGKILLs itself mid-plan, for the crash test.

    python -m tests.planner.crash_planner URL PREFIX STATE_DIR UNTIL_SEQ {events|work}

It folds the event log up to UNTIL_SEQ (committing that checkpoint), runs the planner
reactor once and dies by SIGKILL right after publishing the segment events (``events``) or
the work items (``work``): the run.planned it published is never folded or committed.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import Iterable
from pathlib import Path

from streamproc.bus import streams
from streamproc.bus.connect import connect
from streamproc.bus.publisher import PubAck, Publisher
from streamproc.config import Settings
from streamproc.events.envelope import Envelope
from streamproc.hlc import HybridLogicalClock
from streamproc.impact.index import ImpactIndex
from streamproc.planner.model import StaticSource
from streamproc.planner.reactor import PlannerReactor
from streamproc.planner.role import PLANNER_PROJECTIONS
from streamproc.planner.settings import PlannerSettings
from streamproc.runtime.projector import Projector
from streamproc.runtime.reactor import RoleContext
from streamproc.state.store import RocksStore
from tests.planner.util import add_images

CFG = PlannerSettings(debounce_s=0, segment_size=50)


def crash_index() -> ImpactIndex:
    idx = ImpactIndex()
    add_images(idx, "t1", 800)
    return idx


class DyingPublisher(Publisher):
    def __init__(self, *args: object, die_after: str, **kw: object) -> None:
        super().__init__(*args, **kw)  # type: ignore[arg-type]
        self.die_after = die_after

    async def publish_events(self, events: Iterable[Envelope]) -> list[PubAck]:
        acks = await super().publish_events(events)
        if self.die_after == "events":
            os.kill(os.getpid(), signal.SIGKILL)
        return acks

    async def publish_many(self, items: Iterable[tuple[str, bytes, str]]) -> list[PubAck]:
        batch = list(items)
        acks = await super().publish_many(batch)
        if self.die_after == "work" and any(".work." in s for s, _, _ in batch):
            os.kill(os.getpid(), signal.SIGKILL)
        return acks


async def main(url: str, prefix: str, state_dir: str, until: int, die_after: str) -> None:
    nc = await connect(url)
    pub = await DyingPublisher(nc, prefix=prefix, die_after=die_after).start()
    store = RocksStore(Path(state_dir))
    projections = [f() for f in PLANNER_PROJECTIONS]
    events = streams.stream_names(prefix)[0]
    proj = await Projector(nc, store, projections, stream=events, role="planner").start()
    while proj.applied < until:
        await proj.step()
    settings = Settings(prefix=prefix, data_dir=Path(state_dir).parent, node_id="crash")
    ctx = RoleContext(
        role="planner",
        settings=settings,
        store=store,
        publisher=pub,
        clock=HybridLogicalClock("crash"),
        applied=lambda: proj.applied,
        wait_for=proj.wait_for,
        lag=lambda: 0,
        shared={x.name: x for x in projections},
    )
    reactor = PlannerReactor(settings, CFG, source=StaticSource(crash_index()))
    await reactor.react(ctx)
    print("planner finished without dying", file=sys.stderr)
    sys.exit(3)


if __name__ == "__main__":
    url, prefix, state, until, die_after = sys.argv[1:6]
    asyncio.run(main(url, prefix, state, int(until), die_after))
