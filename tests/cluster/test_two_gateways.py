"""Fault (c): two gateway processes on neighbouring ports, each on a different NATS node of
the cluster. A write through one is readable through the other once a ``?wait=true`` call
on that other has returned: the event log is one total order, so the other gateway's read
model has passed the first write when it has applied its own later one."""

from __future__ import annotations

from pathlib import Path

import aiohttp
import pytest

from streamproc.natsd.cluster import NatsCluster
from streamproc.natsd.server import free_port
from tests.cluster.processes import RoleProcess, clean_env, gateway_config, wait_ready
from tests.gateway.harness import BASE, token

pytestmark = pytest.mark.cluster

S = f"{BASE}/schedules"
ROUNDS = 12


def consecutive_ports(n: int) -> int:
    """The first of ``n`` free consecutive loopback ports (the "port range")."""
    import socket

    for _ in range(50):
        first = free_port()
        try:
            socks = []
            for i in range(n):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", first + i))
            return first
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no free consecutive ports")


async def test_a_write_through_one_gateway_is_read_through_the_other(
    cluster: NatsCluster, tmp_path: Path, prefix: str
) -> None:
    env = clean_env(STREAMPROC_GATEWAY_CONFIG=str(gateway_config(tmp_path / "gw")))
    port = consecutive_ports(2)
    gateways = []
    for i, node in enumerate(cluster.nodes[:2]):
        args = ["gateway", "--nats-url", node.url, "--data-dir", str(tmp_path / f"g{i}")]
        args += ["--prefix", prefix, "--node-id", f"gw{i}", "--http-port", str(port + i)]
        gateways.append(RoleProcess(f"gateway-{i}", args, env, tmp_path / f"g{i}.log").start())
    urls = [f"http://127.0.0.1:{port + i}" for i in range(2)]
    try:
        for proc, url in zip(gateways, urls, strict=True):
            await wait_ready(proc, url)
        auth = {"Authorization": f"Bearer {token()}"}
        async with aiohttp.ClientSession(headers=auth) as http:
            for k in range(ROUNDS):
                one, other = (urls[0], urls[1]) if k % 2 == 0 else (urls[1], urls[0])
                # A plain write through one gateway: 202, not yet applied anywhere we know.
                body = {"id": f"s{k}", "name": f"s{k}", "whenCron": "0 2 * * *", "timezone": "UTC"}
                async with http.post(f"{one}{S}", json=body) as r:
                    assert r.status == 202, await r.text()
                    written = await r.json()
                # A ?wait=true write through the other: answered once that gateway's read
                # model applied it, so it has applied everything before it too.
                marker = {
                    "id": f"m{k}",
                    "name": f"m{k}",
                    "whenCron": "0 3 * * *",
                    "timezone": "UTC",
                }
                async with http.post(f"{other}{S}?wait=true", json=marker) as r:
                    assert r.status == 201, await r.text()
                    assert (await r.json())["version"] > written["seq"]
                async with http.get(f"{other}{S}/s{k}") as r:
                    assert r.status == 200, await r.text()
                    view = await r.json()
                    assert view["version"] == written["seq"] and view["name"] == f"s{k}"
                # A conditional write through the other naming a version just written through
                # the one waits for its read model to reach it (not 404 or 412).
                async with http.post(f"{one}{S}", json={**body, "id": f"t{k}"}) as r:
                    assert r.status == 202, await r.text()
                    fresh = await r.json()
                headers = {"If-Match": f'"{fresh["seq"]}"'}
                async with http.patch(
                    f"{other}{S}/t{k}?wait=true", json={"name": f"t{k}-renamed"}, headers=headers
                ) as r:
                    assert r.status == 200, await r.text()
                    assert (await r.json())["name"] == f"t{k}-renamed"
            for url in urls:  # both gateways list the same schedules
                async with http.get(f"{url}{S}?limit=500") as r:
                    ids = sorted(item["id"] for item in (await r.json())["items"])
                assert len(ids) == 3 * ROUNDS
        for proc in gateways:
            proc.check_alive()
    finally:
        codes = [proc.stop() for proc in gateways]
    assert codes == [0, 0], [proc.tail() for proc in gateways]
