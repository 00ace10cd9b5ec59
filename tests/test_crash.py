"""Crash safety: a projector process SIGKILLed at random moments ends where a clean replay does."""

from __future__ import annotations

import asyncio
import json
import random
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import msgspec

from streamproc.bus.fastclient import FastClient
from streamproc.bus.publisher import Publisher
from streamproc.config import Configuration
from streamproc.natsd.server import EmbeddedNats, free_port
from streamproc.roles import rebuild
from streamproc.state import keys
from streamproc.state.store import RocksStore
from tests.helpers import publish_samples
from tests.samples import sample_event

N = 200_000


def _role(url: str, data: Path, prefix: str, port: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "streamproc.cli",
            "role",
            "activity",
            "--nats-url",
            url,
            "--data-dir",
            str(data),
            "--prefix",
            prefix,
            "--http-port",
            str(port),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def _ready(port: int) -> dict[str, object] | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1) as r:
            return json.loads(r.read())  # type: ignore[no-any-return]
    except urllib.error.HTTPError as exc:  # 503 while catching up: up, not ready
        return json.loads(exc.read())  # type: ignore[no-any-return]
    except OSError:
        return None


def _applied(state: Path) -> int:
    store = RocksStore(state)
    try:
        raw = store.get(keys.META_CF, keys.CHECKPOINT_KEY)
        return 0 if raw is None else msgspec.json.decode(raw, type=keys.Checkpoint).last_seq
    finally:
        store.close()


async def test_sigkill_at_ten_random_moments_then_equal_to_clean_replay(
    nats_server: EmbeddedNats,
    nc: FastClient,
    prefix: str,
    publisher: Publisher,
    stream_names: tuple[str, str, str],
    tmp_path: Path,
) -> None:
    await publish_samples(publisher, [sample_event(i) for i in range(N)])
    data = tmp_path / "data"
    state = data / "state" / "activity"
    rng = random.Random(20261130)
    positions = []
    for _ in range(10):
        port = free_port()
        proc = _role(nats_server.url, data, prefix, port)
        while _ready(port) is None:  # wait until its projector is consuming
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            await asyncio.sleep(0.02)
        await asyncio.sleep(rng.uniform(0.0, 0.4))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        positions.append(_applied(state))
    assert positions == sorted(positions), "progress never goes backwards"
    assert any(0 < p < N for p in positions), f"kills must land mid-fold: {positions}"

    port = free_port()
    proc = _role(nats_server.url, data, prefix, port)
    try:
        for _ in range(1200):
            r = _ready(port)
            if r is not None and r.get("status") == "ready" and r["lag"] == {"activity": 0}:
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError("the restarted projector never caught up")
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    assert _applied(state) == N

    clean = await rebuild(
        nc,
        stream_names[0],
        "activity",
        tmp_path / "clean",
        progress=False,
        configuration=Configuration(),
    )
    crashed = RocksStore(state)
    try:
        from streamproc.state.digest import state_digest

        assert state_digest(crashed) == clean.digest
    finally:
        crashed.close()
