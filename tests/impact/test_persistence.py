"""Persistence through the real nats-server and RocksDB: a ``streamproc role impact``
process SIGKILLed mid-fold resumes to exactly a clean replay's state, and every answer
(cold, then warm) equals a brute-force scan of the events."""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import msgspec
import pytest

from streamproc import roles
from streamproc.bus.fastclient import FastClient
from streamproc.bus.publisher import Publisher
from streamproc.config import Configuration
from streamproc.impact.projection import ImpactProjection
from streamproc.impact.settings import configured_projection
from streamproc.natsd.server import EmbeddedNats, free_port
from streamproc.roles import rebuild
from streamproc.runtime.projection import Folder
from streamproc.runtime.reactor import Configured, RoleSpec
from streamproc.state import keys
from streamproc.state.digest import state_digest
from streamproc.state.store import RocksStore
from tests.helpers import publish_samples
from tests.impact.helpers import Model, random_events
from tests.impact.test_projection import check_answers

# No role folds the index alone (the planner hosts it): the subprocess registers one that
# does, to test the index by itself.
_MAIN = (
    "import sys; from streamproc import roles; "
    "from streamproc.runtime.reactor import Configured, RoleSpec; "
    "from streamproc.impact.settings import configured_projection; "
    "roles.ROLES.setdefault('impact', RoleSpec([Configured(configured_projection)])); "
    "from streamproc.cli import main; sys.exit(main(sys.argv[1:]))"
)


def _role(url: str, data: Path, prefix: str, port: int) -> subprocess.Popen[bytes]:
    env = dict(os.environ, STREAMPROC_BATCH="40", STREAMPROC_IMPACT_WARM_ON_START="true")
    args = ["--nats-url", url, "--data-dir", str(data), "--prefix", prefix]
    return subprocess.Popen(
        [sys.executable, "-c", _MAIN, "role", "impact", *args, "--http-port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env,
    )


def _ready(port: int) -> dict[str, object] | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1) as r:
            return json.loads(r.read())  # type: ignore[no-any-return]
    except urllib.error.HTTPError as exc:
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


async def test_sigkilled_role_resumes_to_the_replay_state_and_answers_exactly(
    nats_server: EmbeddedNats,
    nc: FastClient,
    prefix: str,
    publisher: Publisher,
    stream_names: tuple[str, str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    events = random_events(11, 6000, products=400)
    model = Model()
    for e in events:
        model.apply(e)
    last = await publish_samples(publisher, events)
    data = tmp_path / "data"
    state = data / "state" / "impact"
    rng = random.Random(7)
    positions = []
    for _ in range(3):
        port = free_port()
        proc = _role(nats_server.url, data, prefix, port)
        while _ready(port) is None:
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            await asyncio.sleep(0.02)
        await asyncio.sleep(rng.uniform(0.05, 0.5))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        positions.append(_applied(state))
    assert positions == sorted(positions), "progress never goes backwards"
    assert any(0 < p < last for p in positions), f"kills must land mid-fold: {positions}"

    port = free_port()
    proc = _role(nats_server.url, data, prefix, port)
    try:
        for _ in range(1200):
            r = _ready(port)
            if r is not None and r.get("status") == "ready" and r["lag"] == {"impact": 0}:
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError("the restarted role never caught up")
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0, proc.stderr.read() if proc.stderr else ""
    assert _applied(state) == last

    monkeypatch.setitem(roles.ROLES, "impact", RoleSpec([Configured(configured_projection)]))
    clean = await rebuild(
        nc,
        stream_names[0],
        "impact",
        tmp_path / "clean",
        progress=False,
        configuration=Configuration(),
    )
    assert clean.events == last
    store = RocksStore(state)
    try:
        assert state_digest(store) == clean.digest
        cold = ImpactProjection(max_bytes=64 * 1024, warm_on_start=False)
        Folder(store, [cold], "impact")
        check_answers(cold, model, 11)
        cold.warm_now()
        check_answers(cold, model, 12)
    finally:
        store.close()
