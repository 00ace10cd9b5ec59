"""Running the planner role against the real nats-server and RocksDB, the way a process
hosts it (projector + reactor loop), with an ImpactIndex handed in directly."""

from __future__ import annotations

import asyncio
import base64
import contextlib
from collections.abc import Callable
from pathlib import Path

from streamproc.bus import jsapi, streams
from streamproc.bus.fastclient import FastClient
from streamproc.bus.publisher import Publisher
from streamproc.config import Settings
from streamproc.events.envelope import Envelope, decode
from streamproc.hlc import HybridLogicalClock
from streamproc.planner.cron import CronReactor
from streamproc.planner.model import ImpactSource
from streamproc.planner.reactor import PlannerReactor
from streamproc.planner.role import PLANNER, PLANNER_PROJECTIONS
from streamproc.planner.settings import PlannerSettings
from streamproc.runtime.batching import batch_time_from
from streamproc.runtime.loops import react_loop
from streamproc.runtime.projector import Projector
from streamproc.runtime.reactor import Reactor, RoleContext, build
from streamproc.state.store import RocksStore
from tests.helpers import eventually


class PlannerProcess:
    """Projector + reactors over one state directory; ``stop`` leaves the state behind."""

    def __init__(
        self,
        nc: FastClient,
        publisher: Publisher,
        prefix: str,
        state_dir: Path,
        source: ImpactSource | None,
        cfg: PlannerSettings,
        *,
        wall: Callable[[], int] | None = None,
        cron: bool = False,
        plan: bool = True,
    ) -> None:
        self.nc = nc
        self.publisher = publisher
        self.settings = Settings(prefix=prefix, data_dir=state_dir.parent, node_id="planner-t")
        self.state_dir = state_dir
        self.source = source
        self.cfg = cfg
        self.wall = wall
        self.cron = cron
        self.plan = plan
        self.reactors: list[Reactor] = []
        self.tasks: list[asyncio.Task[None]] = []
        self.store: RocksStore | None = None
        self.proj: Projector | None = None
        self.ctx: RoleContext | None = None

    async def start(self) -> PlannerProcess:
        self.store = RocksStore(self.state_dir)
        # no source given: the role as registered, with the impact projection in it
        makers = PLANNER.projections if self.source is None else PLANNER_PROJECTIONS
        projections = [build(f, self.settings.configuration) for f in makers]
        events = streams.stream_names(self.settings.prefix)[0]
        self.proj = await Projector(
            self.nc,
            self.store,
            projections,
            stream=events,
            role="planner",
            batch=self.settings.batch,
            batch_max_s=self.settings.configuration.built(batch_time_from),  # as the role's
        ).start()
        kw = {"wall": self.wall} if self.wall else {}
        if self.plan:
            self.reactors.append(PlannerReactor(self.settings, self.cfg, source=self.source, **kw))
        if self.cron:
            self.reactors.append(CronReactor(self.settings, self.cfg, **kw))
        proj = self.proj
        self.ctx = RoleContext(
            role="planner",
            settings=self.settings,
            store=self.store,
            publisher=self.publisher,
            clock=HybridLogicalClock("planner-t"),
            applied=lambda: proj.applied,
            wait_for=proj.wait_for,
            lag=proj.lag,
            shared={x.name: x for x in projections},
        )
        self.tasks = [asyncio.create_task(proj.run())]
        if self.reactors:
            self.tasks.append(asyncio.create_task(react_loop(proj, self.reactors, self.ctx)))
        return self

    async def stop(self) -> None:
        if self.proj is not None:
            self.proj.stop()
        # Cancel until done: Python 3.11's wait_for (in react_loop) can swallow a
        # cancellation that races with its inner future completing.
        while not all(t.done() for t in self.tasks):
            for t in self.tasks:
                t.cancel()
            await asyncio.wait(self.tasks, timeout=0.1)
        for t in self.tasks:
            with contextlib.suppress(BaseException):
                t.result()
        if self.store is not None:
            self.store.close()
            self.store = None


async def read_stream(nc: FastClient, stream: str) -> list[tuple[str, bytes, str]]:
    """Every message of a stream as (subject, data, Nats-Msg-Id), without consuming it."""
    info = await jsapi.stream_info(nc, stream)
    assert info is not None
    out = []
    for seq in range(info.state.first_seq, info.state.last_seq + 1):
        try:
            doc = await jsapi.request(nc, f"STREAM.MSG.GET.{stream}", {"seq": seq})
        except jsapi.JsApiError:
            continue  # removed (acked work item)
        m = doc["message"]
        hdrs = base64.b64decode(m.get("hdrs") or b"").decode()
        msg_id = ""
        for line in hdrs.split("\r\n"):
            if line.lower().startswith("nats-msg-id:"):
                msg_id = line.split(":", 1)[1].strip()
        out.append((m["subject"], base64.b64decode(m.get("data") or b""), msg_id))
    return out


async def events_of(nc: FastClient, stream: str, kind: str | None = None) -> list[Envelope]:
    evs = [decode(data) for _, data, _ in await read_stream(nc, stream)]
    return [e for e in evs if kind is None or e.kind == kind]


wait_until = eventually


async def count(nc: FastClient, stream: str) -> int:
    info = await jsapi.stream_info(nc, stream)
    assert info is not None
    return info.state.messages
