"""Roles as separate processes through the CLI (`streamproc gateway|planner|runner`): each
with its own data directory on one NATS. A second process on a state directory in use is
refused; gateways each keep their own read model; runners split one run's segments; a
standby planner takes over within seconds of a SIGKILL of the active one."""

from __future__ import annotations

import asyncio
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from streamproc.bus import jsapi
from streamproc.bus.fastclient import FastClient
from streamproc.bus.publisher import Publisher
from streamproc.cli import build_parser
from streamproc.ids import export_run_id
from streamproc.natsd.cluster import free_ports
from streamproc.natsd.server import EmbeddedNats, free_port
from streamproc.role_cli import DEFAULT_NATS_URL, process_settings
from streamproc.scanner.faults import FaultConfig
from streamproc.state.digest import state_digest
from streamproc.state.store import RocksStore
from tests.helpers import env_configuration
from tests.role_helpers import (
    TENANT,
    drop_lease_bucket,
    log_of,
    planned,
    publish_export,
    publish_planner_inputs,
    readyz,
    start_pair,
    start_role,
    stop,
    wait_for,
    wait_ready,
)
from tests.runner.harness import Planner, digest_of, events, per_digest, register_images, scanner

TTL = "1.5"


def _state_digest(path: Path) -> str:
    store = RocksStore(path, read_only=True)
    try:
        return state_digest(store)
    finally:
        store.close()


async def test_gateways_keep_their_own_read_models_and_a_state_dir_in_use_is_refused(
    nats_server: EmbeddedNats,
    nc: FastClient,
    prefix: str,
    publisher: Publisher,
    stream_names: tuple[str, str, str],
    tmp_path: Path,
) -> None:
    env = {"STREAMPROC_GATEWAY_CONFIG": ""}
    procs, ports, dirs = start_pair(
        "gateway", nats_server.url, prefix, tmp_path, ("g1", "g2"), **env
    )
    try:
        for proc, port, d in zip(procs, ports, dirs, strict=True):
            await wait_ready(proc, port, d)
        second = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "streamproc.cli", "gateway", "--nats-url", nats_server.url,
             "--prefix", prefix, "--data-dir", str(dirs[0]), "--http-port", str(free_port())],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert second.returncode == 2
        assert "is in use by another streamproc process" in second.stderr
        assert str(dirs[0] / "state" / "gateway") in second.stderr

        await publish_planner_inputs(publisher, images=30)
        head = (await jsapi.stream_info(nc, stream_names[0])).state.last_seq  # type: ignore[union-attr]

        async def caught_up() -> bool:
            docs = [await readyz(p) for p in ports]
            return all(d is not None and d["lag"]["gateway"] == 0 for d in docs)

        await wait_for(caught_up, 15, "both gateways caught up")
        assert all(p.poll() is None for p in procs), "both gateways still running"
        assert head > 30
    finally:
        codes = [stop(p) for p in procs]
    assert codes == [0, 0], [log_of(d).read_text()[-1500:] for d in dirs]
    digests = [_state_digest(d / "state" / "gateway") for d in dirs]
    assert digests[0] == digests[1], "two read models folded from the same log"


async def test_a_standby_planner_process_takes_over_after_sigkill(
    nats_server: EmbeddedNats,
    nc: FastClient,
    prefix: str,
    publisher: Publisher,
    stream_names: tuple[str, str, str],
    tmp_path: Path,
) -> None:
    env = {"STREAMPROC_LEASE_TTL_S": TTL, "STREAMPROC_PLANNER_DEBOUNCE_S": "0"}
    events_stream = stream_names[0]
    await publish_planner_inputs(publisher)
    ports = tuple(free_ports("127.0.0.1", 2))
    dirs = tmp_path / "pa", tmp_path / "pb"
    first = start_role("planner", nats_server.url, prefix, dirs[0], ports[0], **env)
    second = None
    try:
        doc = await wait_ready(first, ports[0], dirs[0])
        assert doc["lease"] == {"planner": "active"}
        second = start_role("planner", nats_server.url, prefix, dirs[1], ports[1], **env)
        doc = await wait_ready(second, ports[1], dirs[1])
        assert doc["lease"] == {"planner": "standby"}

        await publish_export(publisher, "fx-1")
        runs = await wait_for(lambda: planned(nc, events_stream), 15, "fx-1 planned")
        assert [r.correlation_id for r in runs] == [export_run_id(TENANT, ["fx-1"])]
        assert runs[0].hlc.endswith(":pa")

        first.send_signal(signal.SIGKILL)
        await asyncio.to_thread(first.wait, 10)
        killed = time.monotonic()

        async def b_active() -> bool:
            d = await readyz(ports[1])
            return d is not None and d.get("lease") == {"planner": "active"}

        await wait_for(b_active, 10, "the standby takes over")
        took = time.monotonic() - killed
        assert took < float(TTL) + 1.5, took

        await publish_export(publisher, "fx-2")

        async def two() -> list | None:  # type: ignore[type-arg]
            got = await planned(nc, events_stream)
            return got if len(got) >= 2 else None

        runs = await wait_for(two, 15, "fx-2 planned by the new active")
        assert [r.correlation_id for r in runs] == [
            export_run_id(TENANT, ["fx-1"]),
            export_run_id(TENANT, ["fx-2"]),
        ]
        assert runs[1].hlc.endswith(":pb")
    finally:
        stop(first)
        if second is not None:
            assert stop(second) == 0, log_of(dirs[1]).read_text()[-1500:]
        await drop_lease_bucket(nc, prefix)
    log = log_of(dirs[1]).read_text()
    assert "planner: standby" in log and "planner: active" in log and "lease released" in log


async def test_two_runner_processes_split_one_run_without_evaluating_an_image_twice(
    nats_server: EmbeddedNats,
    nc: FastClient,
    prefix: str,
    publisher: Publisher,
    stream_names: tuple[str, str, str],
    tmp_path: Path,
) -> None:
    svc = await scanner([], FaultConfig(latency_ms=40, jitter_ms=10))
    names = ["python-app.spdx23.json", "debian-base.cdx15.json", "tools-nested.cdx16.json"]
    imgs = {digest_of(f"split-{i}"): names[i % 3] for i in range(120)}
    register_images(svc, imgs)
    env = {
        "STREAMPROC_SCANNER_URL": svc.url,
        "STREAMPROC_RUNNER_WORKERS": "2",
        "STREAMPROC_RUNNER_INFLIGHT": "2",
    }
    procs, ports, dirs = start_pair(
        "runner", nats_server.url, prefix, tmp_path, ("r1", "r2"), **env
    )
    try:
        for proc, port, d in zip(procs, ports, dirs, strict=True):
            await wait_ready(proc, port, d)
        await Planner(publisher, prefix).run("acme", "split-1", list(imgs), size=10)

        async def completed() -> bool:
            done = await events(nc, stream_names[0], "run.completed")
            return any(e.payload.run_id == "split-1" for e in done)

        await wait_for(completed, 60, "run completed", every=0.2)
    finally:
        codes = [stop(p) for p in procs]
        await svc.close()
    assert codes == [0, 0], [log_of(d).read_text()[-1500:] for d in dirs]
    started = await events(nc, stream_names[0], "segment.started")
    by_runner = Counter(s.payload.runner.rsplit("-", 1)[0] for s in started)
    assert set(by_runner) == {"r1", "r2"}, by_runner  # both took segments
    assert sum(by_runner.values()) == 12, "no segment delivered twice"
    verdicts = [v for v in await events(nc, stream_names[0], "verdict.recorded")]
    assert per_digest(verdicts) == Counter(dict.fromkeys(imgs, 1))
    assert len(svc.evaluations) == 120 and max(svc.evaluations.values()) == 1


def test_role_process_defaults_and_bad_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("NATS_URL", "STREAMPROC_HTTP_PORT", "STREAMPROC_HTTP_HOST"):
        monkeypatch.delenv(var, raising=False)
    parser = build_parser()
    ports = {}
    for role in ("gateway", "planner", "runner", "auditor", "feeds"):
        s = process_settings(parser.parse_args([role]), role)
        assert s.nats_url == DEFAULT_NATS_URL and s.http_host == "127.0.0.1"
        ports[role] = s.http_port
    assert ports == {"gateway": 8480, "planner": 8481, "runner": 8482, "auditor": 8483,
                     "feeds": 8485}  # fmt: skip
    s = process_settings(parser.parse_args(["auditor", "--http-port", "9000"]), "auditor")
    assert s.http_port == 9000
    monkeypatch.setenv("STREAMPROC_HTTP_PORT", "9100")
    monkeypatch.setenv("NATS_URL", "nats://10.0.0.1:4222")
    args = parser.parse_args(["planner"])
    args.configuration = env_configuration()  # as the command line reads it at start
    s = process_settings(args, "planner")
    assert (s.http_port, s.nats_url) == (9100, "nats://10.0.0.1:4222")
    with pytest.raises(SystemExit):
        parser.parse_args(["runner", "--http-port", "70000"])


async def test_a_taken_http_port_is_a_clear_error(
    nats_server: EmbeddedNats,
    nc: FastClient,
    prefix: str,
    stream_names: tuple[str, str, str],
    tmp_path: Path,
) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        proc = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "streamproc.cli", "auditor", "--nats-url", nats_server.url,
             "--prefix", prefix, "--data-dir", str(tmp_path / "a"), "--http-port", str(port)],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert "streamproc auditor:" in proc.stderr
    assert f"cannot listen on 127.0.0.1:{port}: address already in use" in proc.stderr.lower()
    assert "lease taken" not in proc.stderr, "refused before it connected or took a lease"
    await drop_lease_bucket(nc, prefix)
