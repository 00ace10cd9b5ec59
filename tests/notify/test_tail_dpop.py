"""``streamproc notify tail --http`` against a real gateway that accepts DPoP-bound tokens
only: the command signs with the data directory's key, takes the nonce challenge, and
refuses to start without a token bound to that key."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from streamproc.bus import jsapi
from streamproc.client.settings import dpop_key
from streamproc.configfile.sections import Client
from streamproc.natsd.server import EmbeddedNats
from streamproc.notify.feed_state import FeedState
from tests.gateway.conftest import drop_streams
from tests.gateway.harness import Harness, default_settings, start, stop, token
from tests.notify.feedkit import delta, publish

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
    key = dpop_key(data, Client())
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


async def test_the_tail_takes_over_an_earlier_versions_checkpoint_file(
    dpop_gw: Harness, tmp_path: Path, prefix: str
) -> None:
    """An earlier tail kept ``{url, kind, epoch (the stream's created time), seq}`` in
    ``DATA/notify/notify-tail.json``: the new one resumes after that seq, not from zero."""
    assert dpop_gw.system.publisher is not None and dpop_gw.system.nc is not None
    seqs = await publish(dpop_gw.system.publisher, prefix, [delta("acme", i) for i in range(4)])
    info = await jsapi.stream_info(dpop_gw.system.nc, f"{prefix.upper()}_NOTIFY")
    assert info is not None
    data = tmp_path / "client-data"
    old = {"url": dpop_gw.url, "kind": "rescan.delta", "epoch": info.created, "seq": seqs[1]}
    (data / "notify").mkdir(parents=True)
    (data / "notify" / "notify-tail.json").write_text(json.dumps(old))
    key = dpop_key(data, Client())
    bound = token(scopes="scheduler.read", sub="streamproc-notify", cnf={"jkt": key.jkt})
    out = await tail(data, dpop_gw.url, "--token", bound)
    assert out.returncode == 0, out.stderr
    assert "took over the checkpoint" in out.stderr
    assert [line.split()[0] for line in out.stdout.splitlines()] == [str(s) for s in seqs[2:]]


async def test_the_tail_fails_closed_with_exit_code_3_and_keeps_its_checkpoint(
    dpop_gw: Harness, tmp_path: Path, prefix: str
) -> None:
    assert dpop_gw.system.publisher is not None and dpop_gw.system.nc is not None
    await publish(dpop_gw.system.publisher, prefix, [delta("acme", 0)])
    data = tmp_path / "client-data"
    key = dpop_key(data, Client())
    bound = token(scopes="scheduler.read", sub="streamproc-notify", cnf={"jkt": key.jkt})
    assert (await tail(data, dpop_gw.url, "--token", bound)).returncode == 0
    state = FeedState(data / "notify" / "notify-tail.sqlite", ttl_s=120)
    kept = state.checkpoint("acme", "rescan.delta")
    assert kept is not None and kept.seq == 1
    await jsapi.request(dpop_gw.system.nc, f"STREAM.DELETE.{prefix.upper()}_NOTIFY")
    out = await tail(data, dpop_gw.url, "--token", bound)
    assert out.returncode == 3, out.stderr
    assert (
        "fail closed" in out.stderr and "stream is missing while a checkpoint exists" in out.stderr
    )
    assert "nothing was skipped" in out.stderr
    assert state.checkpoint("acme", "rescan.delta") == kept
    # No command moves the checkpoint by hand, and starting again alone repairs nothing.
    reset = await tail(data, dpop_gw.url, "--token", bound, "--reset")
    assert reset.returncode == 2 and "never reset by the tail" in reset.stderr, reset.stderr
    again = await tail(data, dpop_gw.url, "--token", bound)
    assert again.returncode == 3 and "fail closed" in again.stderr, again.stderr
    assert state.checkpoint("acme", "rescan.delta") == kept
