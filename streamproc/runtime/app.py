"""Running roles in a process: ``streamproc up`` (every role) or one role on its own.

The runner is generic: its caller gives it each role's spec and what it adds around the
roles (the status heartbeat, the demo); the registry that names roles is
:mod:`streamproc.roles`. A role that fails — a fail-closed position error, an I/O error —
stops the whole process with its message and a non-zero exit, rather than running on with
stale or skipped state.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import socket
import sys
from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path
from typing import Protocol

from aiohttp import web

from streamproc import names, tracing
from streamproc.bus import jsapi, streams
from streamproc.bus.connect import NatsAuth, connect
from streamproc.bus.fastclient import FastClient
from streamproc.bus.publisher import Publisher
from streamproc.bus.services import Served
from streamproc.config import Settings
from streamproc.hlc import HybridLogicalClock
from streamproc.natsd.owner import StoreLock, claim
from streamproc.natsd.server import EmbeddedNats
from streamproc.ops_http import add_ops_routes, ops_app
from streamproc.runtime.batching import batch_time_from
from streamproc.runtime.deliveries import role_filter
from streamproc.runtime.leadership import Leadership
from streamproc.runtime.loops import active_react_loop, react_loop, serve_when_current
from streamproc.runtime.projection import Projection
from streamproc.runtime.projector import Projector
from streamproc.runtime.reactor import RoleContext, RoleSpec, build
from streamproc.signals import install_stop_signals
from streamproc.state.settings import sizes_from, trim_from
from streamproc.state.store import RocksStore

log = logging.getLogger(__name__)
READY_LAG = 10_000
"""A projector with more than this many events of its kinds to apply (its lag) is not ready."""


class Heartbeat(Protocol):
    """What a running system announces itself with (the status bucket's record)."""

    async def start(self) -> object: ...

    async def stop(self) -> None: ...


class Extra(Protocol):
    """What a command adds around the running roles (``up --demo``: dev auth before they
    start, then the guide and the demo catalog)."""

    def prepare(self, settings: Settings) -> Settings:
        """Before the system is built: the settings it runs with."""

    async def started(self, system: System) -> None:
        """Once it has started and printed where it answers."""

    async def close(self) -> None:
        """On the way out, before the system closes (also when it failed to start)."""


class System:
    def __init__(
        self,
        settings: Settings,
        specs: Mapping[str, RoleSpec],
        *,
        http: bool = True,
        store_lock: StoreLock | None = None,
        heartbeat: Callable[[System], Heartbeat] | None = None,
    ) -> None:
        """``specs``: the roles to run, in order, each with its spec. ``store_lock``: the
        embedded server's store, already taken (``owner.claim``); without it, and without a
        NATS URL, ``start`` takes it or refuses. ``heartbeat``: makes what announces this
        system while it runs (none: nothing does)."""
        self.settings = settings
        self.roles = list(specs)
        self.specs = dict(specs)
        self._heartbeat = heartbeat
        self.http = http
        self.store_lock = store_lock
        self.server: EmbeddedNats | None = None
        self.nc: FastClient | None = None
        self.projectors: dict[str, Projector] = {}
        self.stores: list[RocksStore] = []
        self.tasks: list[asyncio.Task[None]] = []
        self.runner: web.AppRunner | None = None
        self.http_url = ""
        self.ops_runner: web.AppRunner | None = None
        self.ops_url = ""
        """The ops listener (``/metrics``) of a process that serves the API, if configured."""
        self.publisher: Publisher | None = None
        self.contexts: dict[str, RoleContext] = {}
        self.clock: HybridLogicalClock | None = None
        self.heartbeat: Heartbeat | None = None
        self.leaders: dict[str, Leadership] = {}
        """The lease of every singleton role here (planner, auditor): active or standby."""
        self.served: dict[str, Served] = {}
        """The NATS services of the roles here, once each has caught up."""
        self._serving: list[asyncio.Task[None]] = []
        self._sock: socket.socket | None = None
        self._ops_sock: socket.socket | None = None
        self.serves_api = any(spec.routes is not None for spec in self.specs.values())

    @property
    def nats_url(self) -> str:
        if self.settings.nats_url:
            return self.settings.nats_url
        assert self.server is not None
        return self.server.url

    async def start(self) -> None:
        s = self.settings
        conf = s.configuration
        tracing.configure_from(conf.sections.otel)  # a bad endpoint or a missing extra stops us
        self.heartbeat = None if self._heartbeat is None else self._heartbeat(self)
        # Lock every state directory first: a second process on a directory in use is
        # refused before it touches NATS, consumers or the HLC file.
        sizes = conf.built(sizes_from)
        for role in self.roles:
            self.stores.append(RocksStore(s.state_dir(role), sizes=sizes))
        if self.http:  # a taken port is refused now, before NATS, consumers and leases
            self._sock = listen(s.http_host, s.http_port)
            if self.serves_api and s.ops_port is not None:
                self._ops_sock = listen(s.ops_host, s.ops_port)
        if not s.nats_url:
            self.server = EmbeddedNats(
                s.nats_dir,
                host=s.nats_host,
                port=s.nats_port,
                monitor_port=s.nats_monitor_port,
                lock=self.store_lock,
            )
            await asyncio.to_thread(self.server.start)
        auth = NatsAuth.configured(conf) if s.nats_url else None  # the embedded server has none
        self.nc = await connect(self.nats_url, name=f"streamproc-{s.node_id}", auth=auth)
        defs = streams.definitions(
            s.prefix,
            conf.built(streams.replicas_from),
            conf.built(streams.events_retention_from),
            conf.built(streams.notify_retention_from),
        )
        for r in await streams.apply(self.nc, defs):
            if r.action == "drift":
                log.warning("stream %s drift: %s", r.stream, r.describe())
        self.publisher = await Publisher(self.nc, prefix=s.prefix).start()
        self.clock = HybridLogicalClock(
            s.node_id,
            state_file=s.hlc_file("-".join(self.roles)),
            max_clock_skew_ms=s.max_clock_skew_ms,
            reserve_ms=s.hlc_reserve_ms,
        )
        shared: dict[str, Projection] = {}
        for role, store in zip(self.roles, self.stores, strict=True):
            spec = self.specs[role]
            fresh = [build(make, conf) for make in spec.projections]
            projections = [p for p in fresh if p.name not in shared]
            shared.update({p.name: p for p in projections})
            proj = Projector(
                self.nc,
                store,
                projections,
                stream=s.events_stream,
                role=role,
                batch=s.batch,
                consumer=projector_consumer(role, s.node_id, store.path),
                subjects=s.events_subjects,
                filter_subjects=role_filter(s.prefix, projections),
                trim_interval_s=conf.built(trim_from),
                batch_max_s=conf.built(batch_time_from),
            )
            await proj.start()
            if spec.on_open is not None:
                spec.on_open(shared)
            self.projectors[role] = proj
            self.tasks.append(asyncio.create_task(proj.run(), name=f"projector-{role}"))
            ctx = RoleContext(
                role=role,
                settings=s,
                store=store,
                publisher=self.publisher,
                clock=self.clock,
                applied=partial(_applied, proj),
                wait_for=proj.wait_for,
                lag=proj.lag,
                shared=shared,
            )
            self.contexts[role] = ctx
            if spec.services is not None:
                task = serve_when_current(role, proj, ctx, spec.services, self.served)
                self._serving.append(asyncio.create_task(task, name=f"services-{role}"))
            reactors = [make(s) for make in spec.reactors]
            if reactors and spec.singleton:
                leader = await Leadership.open(self.nc, s, role, proj)
                self.leaders[role] = leader
                self.tasks.append(asyncio.create_task(leader.run(), name=f"lease-{role}"))
                loop = active_react_loop(proj, spec, ctx, leader, reactors)
                self.tasks.append(asyncio.create_task(loop, name=f"reactors-{role}"))
            elif reactors:
                self.tasks.append(
                    asyncio.create_task(react_loop(proj, reactors, ctx), name=f"reactors-{role}")
                )
            for i, service in enumerate(spec.background):
                self.tasks.append(asyncio.create_task(service(ctx), name=f"{role}-service-{i}"))
        if self.http:
            # Bodies stay compressed until a handler decompresses them under a cap (and
            # webhook signatures cover the bytes as sent).
            app = web.Application(
                client_max_size=s.http_max_body, handler_args={"auto_decompress": False}
            )
            add_ops_routes(app, self.ready, metrics=not self.serves_api)
            for role, ctx in self.contexts.items():
                hook = self.specs[role].routes
                if hook is not None:
                    hook(app, ctx)
            self.runner = web.AppRunner(app, access_log=None, shutdown_timeout=30)
            await self.runner.setup()
            assert self._sock is not None
            await web.SockSite(self.runner, self._sock).start()
            self.http_url = f"http://{s.http_host}:{self._sock.getsockname()[1]}"
            if self._ops_sock is not None:
                self.ops_runner = web.AppRunner(ops_app(self.ready), access_log=None)
                await self.ops_runner.setup()
                await web.SockSite(self.ops_runner, self._ops_sock).start()
                self.ops_url = f"http://{_url_host(s.ops_host)}:{self._ops_sock.getsockname()[1]}"
        if self.heartbeat is not None:  # `streamproc status` sees this instance from now on
            await self.heartbeat.start()

    async def ready(self) -> tuple[bool, dict[str, object]]:
        detail: dict[str, object] = {}
        ok = self.nc is not None and self.nc.is_connected
        detail["nats"] = "connected" if ok else "disconnected"
        if ok:
            assert self.nc is not None
            try:
                info = await jsapi.stream_info(self.nc, self.settings.events_stream)
            except jsapi.JsApiError as exc:  # no quorum, an election: not ready, not a 500
                info = None
                detail["stream"] = f"unavailable ({exc.description})"
            if info is not None and info.leaderless:
                ok = False
                detail["stream"] = "unavailable (no stream leader: no quorum, or an election)"
            elif info is None:
                ok = False
                detail.setdefault("stream", "missing")
            else:
                lags = {}
                for role, p in self.projectors.items():
                    p.head = max(p.head, info.state.last_seq)
                    lags[role] = await p.ask_lag()
                    if p.failure is not None or p.lag() > READY_LAG:
                        ok = False
                detail["lag"] = lags
        if self.leaders:  # a standby is ready: warm, and taking over is its whole job
            detail["lease"] = {role: lead.state for role, lead in self.leaders.items()}
        problems = {role: dict(c.problems) for role, c in self.contexts.items() if c.problems}
        if problems:  # a reactor says something is wrong (e.g. the planner's restart check)
            ok = False
            detail["problems"] = problems
        return ok, detail

    async def wait(self, stop: asyncio.Event) -> int:
        """Run until ``stop`` is set or a role fails; returns the exit code."""
        stopper = asyncio.create_task(stop.wait())
        done, _ = await asyncio.wait([stopper, *self.tasks], return_when=asyncio.FIRST_COMPLETED)
        code = 0
        for t in done:
            if t is not stopper and t.exception() is not None:
                print(f"streamproc: {t.get_name()} stopped: {t.exception()}", file=sys.stderr)
                code = 2
        stopper.cancel()
        return code

    async def close(self) -> None:
        if self.heartbeat is not None:  # a clean stop removes this instance from status
            await self.heartbeat.stop()
        # HTTP first: in-flight requests (including ?wait=true) finish while projectors run.
        if self.runner is not None:
            await self.runner.cleanup()
            self.runner = None
        if self.ops_runner is not None:
            await self.ops_runner.cleanup()
            self.ops_runner = None
        for sock in (self._sock, self._ops_sock):  # also when start failed before serving
            if sock is not None:
                sock.close()
        self._sock = self._ops_sock = None
        for t in self._serving:  # then leave the services' queue groups
            t.cancel()
            with contextlib.suppress(BaseException):
                await t
        for served in self.served.values():
            with contextlib.suppress(Exception):
                await served.stop()
        for p in self.projectors.values():
            # A filtered projector passes the events its filter kept from it, so a clean stop
            # leaves its checkpoint at the head it had caught up with: its state then equals
            # a replay of the same log, checkpoint included.
            with contextlib.suppress(Exception):
                async with asyncio.timeout(5.0):
                    await p.sync()
            p.stop()
        for t in self.tasks:
            if not t.done():
                t.cancel()
            with contextlib.suppress(BaseException):
                await t
        for lead in self.leaders.values():  # reactors have stopped: hand the lease on now
            await lead.close()
        for p in self.projectors.values():  # their tasks were cancelled: nothing folds now
            p.finish()
        if self.publisher is not None:
            await self.publisher.close()
        if self.clock is not None:
            self.clock.close()
        if self.nc is not None:
            with contextlib.suppress(Exception):
                await self.nc.close()
        for store in self.stores:
            store.close()
        if self.server is not None:
            await asyncio.to_thread(self.server.stop)
        if self.store_lock is not None:  # also when start failed before the server ran
            self.store_lock.release()


def _applied(projector: Projector) -> int:
    return projector.applied


class ListenError(OSError):
    """The HTTP port cannot be listened on (taken, not allowed, no such address)."""


def listen(host: str, port: int) -> socket.socket:
    """The HTTP listening socket, bound up front so a taken port fails fast and clearly."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        return socket.create_server((host, port), family=family, backlog=1024)
    except OSError as exc:
        reason = (exc.strerror or str(exc)).split(" (while attempting")[0]
        raise ListenError(exc.errno, f"cannot listen on {host}:{port}: {reason}") from None


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def projector_consumer(role: str, node_id: str, state_dir: Path) -> str:
    """The durable consumer of one role's state directory: distinct for every process that
    hosts the role (gateways, runners, a standby), the same across its restarts."""
    where = hashlib.sha256(str(state_dir.resolve()).encode()).hexdigest()[:8]
    return names.projector_consumer(role, node_id, where)


async def run_roles(
    settings: Settings,
    specs: Mapping[str, RoleSpec],
    *,
    http: bool = True,
    heartbeat: Callable[[System], Heartbeat] | None = None,
    extra: Extra | None = None,
) -> int:
    """Run the roles of ``specs`` until SIGINT/SIGTERM or until one fails; the exit code."""
    roles = list(specs)
    # A second `up` on this data directory stops here, before it touches anything.
    lock = None if settings.nats_url else await claim(settings.nats_dir, settings.node_id)
    if extra is not None:
        try:
            settings = extra.prepare(settings)
        except BaseException:
            if lock is not None:
                lock.release()
            raise
    system = System(settings, specs, http=http, store_lock=lock, heartbeat=heartbeat)
    stop = asyncio.Event()
    install_stop_signals(stop)
    try:
        await system.start()
        print(f"streamproc {' '.join(roles)} running (node {settings.node_id})", flush=True)
        print(f"  NATS         {system.nats_url}", flush=True)
        if settings.nats_url is None and system.server is not None:
            print(f"  NATS store   {system.server.store_dir}", flush=True)
            if system.server.monitor_url:
                print(f"  NATS monitor {system.server.monitor_url}/varz, /jsz", flush=True)
        for role in roles:
            print(f"  state        {settings.state_dir(role)}", flush=True)
        if system.http_url:
            metrics = system.ops_url if system.serves_api else system.http_url
            for path, base in (("healthz", system.http_url), ("readyz", system.http_url),
                               ("metrics", metrics)):  # fmt: skip
                url = f"{base}/{path}" if base else "off (--ops-port PORT: on a loopback listener)"
                print(f"  {path:<12} {url}", flush=True)
            if "gateway" in roles:
                print(f"  API          {system.http_url}/api/v1/scheduler", flush=True)
        if extra is not None:
            await extra.started(system)
        print("Press Ctrl-C to stop.", flush=True)
        code = await system.wait(stop)
    finally:
        if extra is not None:
            await extra.close()
        await system.close()
    if code == 0:
        print("streamproc stopped cleanly", flush=True)
    return code
