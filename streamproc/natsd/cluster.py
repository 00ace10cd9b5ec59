"""A JetStream cluster of ``nats-server`` processes on one machine, on loopback.

For trying a replicated setup (``streamproc nats --cluster 3``) and for the fault tests
(``tests/cluster``): every node has its own client, route and monitoring port and its own
store directory, and each node can be stopped, killed and restarted on its own. Leaders are
found through the monitoring endpoint (meta group) and the JetStream API (a stream's group).
``deploy/nats/cluster/n1.conf`` … ``n3.conf`` are what :func:`node_config` writes for
``NatsCluster(..., ports=DEPLOY_PORTS)``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nats.aio.client import Client

from streamproc.bus import jsapi
from streamproc.natsd.owner import claim
from streamproc.natsd.server import (
    MAX_PAYLOAD,
    PORT_TAKEN,
    NatsServerError,
    find_binary,
    spawn,
)
from streamproc.signals import install_stop_signals

log = logging.getLogger(__name__)

CLUSTER_NAME = "streamproc"
PORT_ATTEMPTS = 3
DEPLOY_PORTS = (4222, 6222, 8222)
"""First client, route and monitoring port of ``deploy/nats/cluster`` (node i adds i)."""


def free_ports(host: str, n: int) -> list[int]:
    """``n`` distinct free ports. All are bound at once: picked one at a time, a port released
    by one pick can come back as a later one (a node's client and route port were once the
    same, and the node could not listen)."""
    with contextlib.ExitStack() as held:
        socks = [held.enter_context(socket.socket()) for _ in range(n)]
        for s in socks:
            s.bind((host, 0))
        return [int(s.getsockname()[1]) for s in socks]


@dataclass(frozen=True)
class NodePorts:
    client: int
    route: int
    monitor: int


def node_config(
    name: str, store_dir: Path | str, host: str, ports: NodePorts, routes: list[int]
) -> str:
    """One node's config: JetStream, its own store, routes to every node (itself included,
    which nats-server skips) so any node can be started first."""
    route_lines = "".join(f"    nats-route://{host}:{p}\n" for p in routes)
    return (
        f"server_name: {name}\n"
        f"listen: {host}:{ports.client}\n"
        f"http: {host}:{ports.monitor}\n"
        f"max_payload: {MAX_PAYLOAD}\n"
        "\n"
        "jetstream {\n"
        f"  store_dir: {json.dumps(str(store_dir))}\n"
        "}\n"
        "\n"
        "cluster {\n"
        f"  name: {CLUSTER_NAME}\n"
        f"  listen: {host}:{ports.route}\n"
        f"  routes: [\n{route_lines}  ]\n"
        "}\n"
    )


class ClusterNode:
    """One ``nats-server`` of the cluster; its store survives stop/kill/start."""

    def __init__(
        self,
        name: str,
        base: Path,
        host: str,
        ports: NodePorts,
        binary: str,
        pass_fds: tuple[int, ...] = (),
    ) -> None:
        self.name = name
        self.pass_fds = pass_fds
        """Handed to the process: the cluster's store lock, which then lasts while it runs."""
        self.dir = base / name
        self.host = host
        self.ports = ports
        self.binary = binary
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = self.dir / "nats-server.log"
        self.conf_path = self.dir / "nats-server.conf"
        self._mark = 0
        """Where this start's part of the (appended) log begins."""

    @property
    def url(self) -> str:
        return f"nats://{self.host}:{self.ports.client}"

    @property
    def monitor_url(self) -> str:
        return f"http://{self.host}:{self.ports.monitor}"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.running and self.proc is not None else None

    def write_config(self, routes: list[int]) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        store = self.dir / "jetstream"
        self.conf_path.write_text(node_config(self.name, store, self.host, self.ports, routes))

    def launch(self) -> None:
        """Start the process (not waiting for it); the log is appended across restarts."""
        if self.running:
            raise NatsServerError(f"node {self.name} is already running (pid {self.pid})")
        with open(self.log_path, "ab") as log:
            self._mark = log.tell()
            self.proc = spawn(
                [self.binary, "-c", str(self.conf_path)],
                stdout=log,
                stderr=subprocess.STDOUT,
                pass_fds=self.pass_fds,
            )

    def wait_ready(self, deadline: float) -> None:
        """Until the log of this start says ready (the listener is up)."""
        while time.monotonic() < deadline:
            with open(self.log_path, "rb") as f:
                f.seek(self._mark)
                text = f.read().decode(errors="replace")
            if "Server is ready" in text:
                return
            if self.proc is not None and self.proc.poll() is not None:
                raise NatsServerError(
                    f"nats-server {self.name} exited with code {self.proc.returncode} while "
                    f"starting: {text.strip().splitlines()[-3:]}"
                )
            time.sleep(0.02)
        raise NatsServerError(f"nats-server {self.name} was not ready in time ({self.log_path})")

    def stop(self, timeout: float = 10.0) -> None:
        """Graceful shutdown (SIGTERM), SIGKILL if it does not exit within ``timeout``."""
        if not self.running:
            return
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()

    def kill(self) -> None:
        """SIGKILL: a crash, as far as the other nodes and the store can tell."""
        if self.running:
            assert self.proc is not None
            self.proc.kill()
            self.proc.wait()

    def monitor(self, path: str, timeout: float = 2.0) -> dict[str, Any] | None:
        """A monitoring endpoint's JSON, or None when the node does not answer."""
        try:
            with urllib.request.urlopen(self.monitor_url + path, timeout=timeout) as r:
                return json.loads(r.read())  # type: ignore[no-any-return]  # json.loads is Any; a monitoring document is a JSON object
        except urllib.error.HTTPError as exc:  # /healthz answers 503 with a JSON body
            try:
                return json.loads(exc.read())  # type: ignore[no-any-return]  # json.loads is Any; a monitoring document is a JSON object
            except ValueError:
                return None
        except (OSError, ValueError):
            return None

    def healthy(self) -> bool:
        doc = self.monitor("/healthz") if self.running else None
        return doc is not None and doc.get("status") == "ok"

    def routed_to(self) -> set[str]:
        """The servers this node has a route to (by name)."""
        doc = self.monitor("/routez") if self.running else None
        return {str(r.get("remote_name")) for r in (doc or {}).get("routes") or []}


class NatsCluster:
    """``n`` JetStream nodes named n1…nN under ``base_dir`` on ``host``.

    Ports are free ones unless ``ports`` gives the first client, route and monitoring port
    (node i then uses each plus i).
    """

    def __init__(
        self,
        base_dir: Path,
        n: int = 3,
        *,
        host: str = "127.0.0.1",
        ports: tuple[int, int, int] | None = None,
        binary: str | None = None,
        pass_fds: tuple[int, ...] = (),
    ) -> None:
        """``pass_fds``: handed to every node (``streamproc nats --cluster`` gives its store
        lock, so no other server starts on these stores while a node runs)."""
        if n < 1:
            raise ValueError("a cluster needs at least one node")
        self.base_dir = Path(base_dir)
        self.host = host
        self.fixed_ports = ports
        binary = binary or find_binary()
        picked = self._ports(n)
        self.nodes = [
            ClusterNode(f"n{i + 1}", self.base_dir, host, picked[i], binary, pass_fds)
            for i in range(n)
        ]
        self._write_configs()

    def _ports(self, n: int) -> list[NodePorts]:
        p = self.fixed_ports
        if p is not None:
            return [NodePorts(p[0] + i, p[1] + i, p[2] + i) for i in range(n)]
        got = free_ports(self.host, 3 * n)
        return [NodePorts(*got[3 * i : 3 * i + 3]) for i in range(n)]

    def _write_configs(self) -> None:
        routes = [node.ports.route for node in self.nodes]
        for node in self.nodes:
            node.write_config(routes)

    @property
    def url(self) -> str:
        """Every node, comma-separated: the ``NATS_URL`` form of a cluster."""
        return ",".join(node.url for node in self.nodes)

    def node(self, name: str) -> ClusterNode:
        for node in self.nodes:
            if node.name == name:
                return node
        raise KeyError(f"no node {name!r} in the cluster ({[n.name for n in self.nodes]})")

    # ------------------------------------------------------------------ lifecycle

    def start(self, timeout: float = 30.0) -> NatsCluster:
        """Start every node not running and wait until the cluster is healthy.

        With free ports picked for it, a port another process took in the meantime (a
        free port is only free until someone binds it) makes the whole cluster start again
        on fresh ones, a few times."""
        deadline = time.monotonic() + timeout
        for attempt in range(PORT_ATTEMPTS):
            started = [node for node in self.nodes if not node.running]
            try:
                for node in started:
                    node.launch()
                for node in started:
                    node.wait_ready(deadline)
                self.wait_healthy(max(0.1, deadline - time.monotonic()))
                return self
            except NatsServerError as exc:
                self.stop()
                fresh = len(started) == len(self.nodes) and self.fixed_ports is None
                if not (fresh and PORT_TAKEN in str(exc)) or attempt + 1 == PORT_ATTEMPTS:
                    raise
                log.warning("cluster start: %s; again on other ports", exc)
                for node, ports in zip(self.nodes, self._ports(len(self.nodes)), strict=True):
                    node.ports = ports
                self._write_configs()
            except BaseException:
                self.stop()
                raise
        raise AssertionError("unreachable")  # pragma: no cover

    def start_node(self, name: str, timeout: float = 20.0) -> ClusterNode:
        """(Re)start one node and wait until it listens (not until it has caught up)."""
        node = self.node(name)
        node.launch()
        node.wait_ready(time.monotonic() + timeout)
        return node

    def kill(self, name: str) -> ClusterNode:
        node = self.node(name)
        node.kill()
        return node

    def restart(self, name: str, timeout: float = 20.0) -> ClusterNode:
        self.node(name).stop()
        return self.start_node(name, timeout)

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()

    def __enter__(self) -> NatsCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ health and leaders

    def meta_leader(self) -> str | None:
        """The meta-group leader's server name, as a running node reports it."""
        for node in self.nodes:
            if not node.running:
                continue
            doc = node.monitor("/jsz")
            leader = ((doc or {}).get("meta_cluster") or {}).get("leader")
            if leader:
                return str(leader)
        return None

    def wait_healthy(self, timeout: float = 30.0) -> None:
        """Until every running node answers ``/healthz`` ok (JetStream current), has a route
        to every other running node (so each announces all of them to its clients: what
        replica detection counts) and a meta leader is elected. A quorum alone elects the
        leader while the last route may still be forming."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            running = [n for n in self.nodes if n.running]
            names = {n.name for n in running}
            if (
                running
                and all(n.healthy() and n.routed_to() >= names - {n.name} for n in running)
                and self.meta_leader()
            ):
                return
            time.sleep(0.1)
        bad = [n.name for n in self.nodes if n.running and not n.healthy()]
        raise NatsServerError(
            f"cluster not healthy within {timeout:.0f} s (unhealthy: {bad or 'none'}, "
            f"meta leader: {self.meta_leader()})"
        )


async def stream_cluster(nc: Client, stream: str) -> dict[str, Any]:
    """The stream's ``cluster`` block: leader and replicas with ``current`` and ``lag``."""
    doc = await jsapi.request(nc, f"STREAM.INFO.{stream}")
    return dict(doc.get("cluster") or {})


async def stream_leader(nc: Client, stream: str) -> str | None:
    try:
        return (await stream_cluster(nc, stream)).get("leader")
    except jsapi.JsApiError:
        return None


async def move_leader(nc: Client, stream: str, to: str, timeout: float = 30.0) -> None:
    """Make ``to`` the stream's leader (a step-down naming the preferred successor)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if await stream_leader(nc, stream) == to:
            return
        try:
            body = {"placement": {"preferred": to}}
            await jsapi.request(nc, f"STREAM.LEADER.STEPDOWN.{stream}", body)
        except jsapi.JsApiError:
            pass  # an election in progress, or the preferred peer not yet current
        await asyncio.sleep(0.2)
    raise NatsServerError(f"stream {stream}: {to} did not become leader within {timeout:.0f} s")


async def wait_stream_current(nc: Client, stream: str, timeout: float = 30.0) -> str:
    """Until the stream has a leader and every replica is current; returns the leader."""
    deadline = time.monotonic() + timeout
    last: dict[str, Any] = {}
    while time.monotonic() < deadline:
        try:
            last = await stream_cluster(nc, stream)
        except jsapi.JsApiError:
            last = {}
        leader = last.get("leader")
        replicas = last.get("replicas") or []
        if leader and all(r.get("current") and not r.get("offline") for r in replicas):
            return str(leader)
        await asyncio.sleep(0.1)
    raise NatsServerError(f"stream {stream} not current within {timeout:.0f} s: {last}")


async def serve(
    base_dir: Path, n: int, host: str, ports: tuple[int, int, int], node_id: str
) -> int:
    """``streamproc nats --cluster N``: run a local cluster until SIGINT/SIGTERM; it owns
    ``base_dir`` (:mod:`streamproc.natsd.owner`), so one-shot commands find it there."""
    lock = await claim(base_dir, node_id)
    try:
        cluster = NatsCluster(base_dir, n, host=host, ports=ports, pass_fds=(lock.fd,))
        await asyncio.to_thread(cluster.start)
    except BaseException:
        lock.release()
        raise
    pids = [node.pid for node in cluster.nodes if node.pid is not None]
    lock.update(url=cluster.url, server_pids=pids, ready=True)
    try:
        print(f"nats-server JetStream cluster of {n} on {host}, stores under {base_dir}")
        for node in cluster.nodes:
            print(f"  {node.name}  {node.url}  monitor {node.monitor_url}  pid {node.pid}")
        print(f"NATS_URL={cluster.url}")
        print("Press Ctrl-C to stop.", flush=True)
        stop = asyncio.Event()
        install_stop_signals(stop)
        await stop.wait()
    finally:
        await asyncio.to_thread(cluster.stop)
        lock.release()
    print("nats-server cluster stopped")
    return 0
