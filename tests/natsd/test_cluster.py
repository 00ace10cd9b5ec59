"""NatsCluster and replica auto-detection on a real 3-node JetStream cluster (loopback)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from streamproc.bus import streams
from streamproc.bus.connect import connect
from streamproc.bus.fastclient import FastClient
from streamproc.bus.topology import cluster_size
from streamproc.config import ConfigError
from streamproc.configfile.loader import environ
from streamproc.natsd.cluster import (
    NatsCluster,
    move_leader,
    stream_cluster,
    stream_leader,
    wait_stream_current,
)
from streamproc.natsd.server import NatsServerError
from tests.helpers import eventually


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[NatsCluster]:
    c = NatsCluster(tmp_path / "cluster", 3).start()
    yield c
    c.stop()


async def test_a_node_whose_route_forms_after_we_connect_is_counted(tmp_path: Path) -> None:
    """``NATS_URL`` names every node, so the pool holds them all from the start: the third
    node's route, formed after we connected, must still count (the latest INFO's list), or
    streams made then would get one replica on a three-node cluster."""
    c = NatsCluster(tmp_path / "c", 3)
    try:
        c.start_node("n1")
        c.start_node("n2")
        nc = await connect(c.node("n1").url + "," + c.node("n2").url + "," + c.node("n3").url)
        try:
            await eventually(lambda: cluster_size(nc) == 2, what="the two nodes announced")
            c.start_node("n3")
            await eventually(lambda: cluster_size(nc) == 3, what="the third node counted")
        finally:
            await nc.close()
    finally:
        c.stop()


async def replicas_of(nc: FastClient, stream: str) -> int:
    info = await stream_cluster(nc, stream)
    return 1 + len(info.get("replicas") or [])


async def test_auto_replicas_make_r3_streams_and_never_demote_them(
    cluster: NatsCluster, prefix: str
) -> None:
    assert cluster.meta_leader() in {n.name for n in cluster.nodes}
    nc = await connect(cluster.nodes[0].url)
    try:
        # The full mesh is up (NatsCluster.start waits for it); the connected server's
        # announcement of its peers reaches the client as an async INFO.
        await eventually(lambda: cluster_size(nc) == 3, what="3 servers announced")
        results = await streams.apply(nc, streams.definitions(prefix, streams.AUTO))
        assert {r.action for r in results} == {"created"}
        names = streams.stream_names(prefix)
        for name in names:
            assert (await jsapi_config(nc, name))["num_replicas"] == 3
            await wait_stream_current(nc, name)
            assert await replicas_of(nc, name) == 3
        leader = await stream_leader(nc, names[0])
        assert leader is not None
        for name in names[1:]:  # so that the node killed below leads no stream
            await move_leader(nc, name, leader)
        follower = next(n for n in cluster.nodes if n.name != leader)
        assert not cluster.kill(follower.name).running
        survivor = next(n for n in cluster.nodes if n.running)
        nc2 = await connect(survivor.url)
        try:
            # With a node down the streams stay R3 ("unchanged"): auto never demotes.
            again = await streams.apply(nc2, streams.definitions(prefix, streams.AUTO))
            assert {r.action for r in again} == {"unchanged"}
            info = await stream_cluster(nc2, names[0])
            assert info["leader"] == leader
            assert follower.name in {r["name"] for r in info["replicas"]}
            cluster.start_node(follower.name)
            await asyncio.to_thread(cluster.wait_healthy)  # the meta group too, for updates
            await wait_stream_current(nc2, names[0])
            # An explicit count is applied as asked: R1, then back to R3.
            (down,) = await streams.apply(nc2, streams.definitions(prefix, 1)[:1])
            assert down.changed == {"num_replicas": (3, 1)}
            (up,) = await streams.apply(nc2, streams.definitions(prefix, streams.AUTO)[:1])
            assert up.changed == {"num_replicas": (1, 3)}
            await wait_stream_current(nc2, names[0])
            assert await replicas_of(nc2, names[0]) == 3
        finally:
            await nc2.close()
    finally:
        await nc.close()


async def jsapi_config(nc: FastClient, stream: str) -> dict[str, object]:
    from streamproc.bus import jsapi

    info = await jsapi.stream_info(nc, stream)
    assert info is not None
    return info.config


async def test_auto_is_one_replica_on_a_single_server(nc: FastClient, prefix: str) -> None:
    assert cluster_size(nc) == 1
    assert await streams.detected_replicas(nc) == 1
    defs = streams.definitions(prefix, streams.AUTO)[:1]
    try:
        (result,) = await streams.apply(nc, defs)
        assert result.action == "created"
        assert (await jsapi_config(nc, defs[0]["name"]))["num_replicas"] == 1
    finally:
        from streamproc.bus import jsapi

        await jsapi.request(nc, f"STREAM.DELETE.{defs[0]['name']}")


def test_configured_replicas_reads_the_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(streams.REPLICAS_ENV, raising=False)
    assert streams.configured_replicas(environ()) == streams.AUTO
    monkeypatch.setenv(streams.REPLICAS_ENV, "3")
    assert streams.configured_replicas(environ()) == 3
    for bad in ("-1", "6", "three"):
        monkeypatch.setenv(streams.REPLICAS_ENV, bad)
        with pytest.raises(ConfigError, match=streams.REPLICAS_ENV):
            streams.configured_replicas(environ())


def test_a_node_that_cannot_start_is_a_clear_error(tmp_path: Path) -> None:
    c = NatsCluster(tmp_path / "c", 1)
    c.nodes[0].conf_path.write_text("listen: nonsense:::\n")
    with pytest.raises(NatsServerError, match="n1 exited"):
        c.start(timeout=10)
    assert not c.nodes[0].running
    with pytest.raises(KeyError, match="no node 'n9'"):
        c.node("n9")


def test_a_port_taken_before_a_node_binds_it_starts_the_cluster_on_others(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A free port is free only until someone binds it: another process taking one between
    the pick and the node's bind restarts the cluster on fresh ports, not a failure."""
    import socket

    from streamproc.natsd import cluster as cluster_mod

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        first = iter([True])
        real = cluster_mod.free_ports

        def picks(host: str, n: int) -> list[int]:  # the first pick's first port is taken
            got = real(host, n)
            return [port, *got[1:]] if next(first, False) else got

        monkeypatch.setattr(cluster_mod, "free_ports", picks)
        c = NatsCluster(tmp_path / "cluster", 3)
        assert c.nodes[0].ports.client == port
        c.start()
        try:
            assert port not in {p for n in c.nodes for p in vars(n.ports).values()}
            assert all(n.running for n in c.nodes) and c.meta_leader()
        finally:
            c.stop()


def test_a_clusters_free_ports_are_all_different() -> None:
    from streamproc.natsd.cluster import free_ports

    for _ in range(20):  # picked one at a time, 60 ports repeated one about every 7 tries
        got = free_ports("127.0.0.1", 60)
        assert len(set(got)) == 60
