"""``streamproc notify tail --http`` against a real gateway that accepts DPoP-bound tokens
only: the command signs with the data directory's key, takes the nonce challenge, and
refuses to start without a token bound to that key."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from streamproc.bus.server import EmbeddedNats
from streamproc.client.settings import dpop_key
from tests.gateway.conftest import drop_streams
from tests.gateway.harness import Harness, default_settings, start, stop, token
from tests.notify.test_feed import delta, publish

CLI = [sys.executable, "-m", "streamproc.cli"]


@pytest.fixture
async def dpop_gw(tmp_path: Path, nats_server: EmbeddedNats, prefix: str) -> AsyncIterator[Harness]:
    h = await start(
        tmp_path, nats_server.url, prefix, default_settings(tmp_path, required_modes=["dpop"])
    )
    try:
        yield h
    finally:
        await stop(h)
        await drop_streams(nats_server.url, prefix)


async def tail(
    data: Path, url: str, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return await asyncio.to_thread(
        subprocess.run,
        [*CLI, "notify", "tail", "--http", url, "--once", "--data-dir", str(data), *args],
        capture_output=True, text=True, timeout=60, env=env,
    )  # fmt: skip


async def test_notify_tail_http_on_a_dpop_only_gateway(
    dpop_gw: Harness, tmp_path: Path, prefix: str
) -> None:
    assert dpop_gw.system.publisher is not None
    await publish(dpop_gw.system.publisher, prefix, [delta("acme", i) for i in range(3)])
    data = tmp_path / "client-data"
    # Without a token nothing is sent: a usage error naming the client's key.
    refused = await tail(data, dpop_gw.url)
    assert refused.returncode == 2, refused.stderr
    key = dpop_key(data)
    assert "never sent without a token" in refused.stderr and key.jkt in refused.stderr
    # An unbound token is refused by the client itself (a DPoP-only gateway would refuse it).
    unbound = token(scopes="scheduler.read", sub="streamproc-notify")
    out = await tail(data, dpop_gw.url, "--token", unbound)
    assert out.returncode == 2 and "not DPoP-bound" in out.stderr, out.stderr
    bound = token(scopes="scheduler.read", sub="streamproc-notify", cnf={"jkt": key.jkt})
    out = await tail(data, dpop_gw.url, "--token", bound)
    assert out.returncode == 0, out.stderr
    assert len(out.stdout.splitlines()) == 3 and "rescan.delta" in out.stdout
    again = await tail(data, dpop_gw.url, "--token", bound)
    assert again.returncode == 0 and again.stdout == "", again.stderr
