"""The planner's restart check with real processes: ``streamproc planner`` killed (SIGKILL, at
the crash point between a plan's log events and its work items) *after* an earlier run has
completed, restarted: the lost work items are queued again, each exactly once — with the
work stream's duplicate window shrunk to 100 ms, so JetStream's de-duplication cannot be
what keeps them single — and a real runner then runs every segment once."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import REGISTRY

from streamproc import status
from streamproc.bus import jsapi
from streamproc.bus.fastclient import FastClient
from streamproc.bus.publisher import Publisher
from streamproc.config import Settings
from streamproc.events.envelope import new_event
from streamproc.ids import export_run_id
from streamproc.natsd.cluster import free_ports
from streamproc.natsd.server import EmbeddedNats, free_port
from streamproc.roles import System
from streamproc.runner.settings import RunnerSettings
from tests.helpers import env_configuration
from tests.planner.harness import count, events_of, read_stream
from tests.role_helpers import (
    TENANT,
    drop_lease_bucket,
    log_of,
    publish_export,
    publish_planner_inputs,
    readyz,
    start_role,
    stop,
    take_lease,
    wait_for,
    wait_ready,
)
from tests.runner.harness import Planner, hlc, register_images, scanner, start_runner
from tests.test_status import status_cli

IMAGES = 20
ENV = {"STREAMPROC_PLANNER_DEBOUNCE_S": "0", "STREAMPROC_PLANNER_SEGMENT_SIZE": "2"}
CRASH = {"STREAMPROC_CRASH_AT": "planner.after_log_events:2"}
DIGESTS = [f"sha256:{n:064x}" for n in range(5)]


async def _run_completed(nc: FastClient, events: str, run_id: str) -> bool:
    done = await events_of(nc, events, "run.completed")
    return any(e.payload.run_id == run_id for e in done)


async def _check_done(data: Path) -> bool:
    """This start's restart check has finished (each start rewrites the log)."""
    return "restart check done" in log_of(data).read_text()


async def test_a_planner_killed_between_events_and_work_items_after_a_finished_run(
    nats_server: EmbeddedNats,
    nc: FastClient,
    prefix: str,
    publisher: Publisher,
    stream_names: tuple[str, str, str],
    tmp_path: Path,
) -> None:
    events, work, _ = stream_names
    info = await jsapi.stream_info(nc, work)
    assert info is not None  # a tiny duplicate window: a blind re-send would be stored again
    await jsapi.request(nc, f"STREAM.UPDATE.{work}", {**info.config, "duplicate_window": 10**8})
    await publish_planner_inputs(publisher, IMAGES)
    svc = await scanner()
    register_images(svc, {f"sha256:{n:064x}": "debian-base.cdx15.json" for n in range(IMAGES)})
    settings = RunnerSettings(scanner_url=svc.url, workers=2, inflight=2)
    runner: System | None = await start_runner(tmp_path / "r1", nats_server.url, prefix, settings)
    data, port = tmp_path / "planner", free_port()
    proc = start_role("planner", nats_server.url, prefix, data, port, **ENV, **CRASH)
    try:
        await wait_ready(proc, port, data)
        first = export_run_id(TENANT, ["x1"])
        await publish_export(publisher, "x1")  # lib1: 5 images, 3 segments
        await wait_for(lambda: _run_completed(nc, events, first), 60, "the first run completed")
        await runner.close()  # nobody takes the second run's items: the queue shows them all
        runner = None

        await publish_export(publisher, "x2")
        code = await asyncio.wait_for(asyncio.to_thread(proc.wait), 60)
        assert code == -signal.SIGKILL, log_of(data).read_text()[-2000:]
        assert "crash point planner.after_log_events reached" in log_of(data).read_text()
        second = export_run_id(TENANT, ["x2"])
        segs = [e for e in await events_of(nc, events, "segment.enqueued")
                if e.payload.run_id == second]  # fmt: skip
        assert len(segs) == 3 and await count(nc, work) == 0  # logged, never queued

        proc = start_role("planner", nats_server.url, prefix, data, port, **ENV)
        ready = await wait_ready(proc, port, data)
        assert "problems" not in ready
        await wait_for(lambda: _check_done(data), 30, "the restart check")
        queued = [i for _, _, i in await read_stream(nc, work)]
        assert sorted(queued) == sorted(e.id for e in segs), "each lost item queued once"
        assert "restart check done: 3 work item(s)" in log_of(data).read_text()
        assert "restart check failed" not in log_of(data).read_text()

        await asyncio.sleep(0.3)  # past the duplicate window
        assert stop(proc) == 0
        proc = start_role("planner", nats_server.url, prefix, data, port, **ENV)
        await wait_ready(proc, port, data)
        await wait_for(lambda: _check_done(data), 30, "the second restart check")
        assert "restart check done: 0 work item(s)" in log_of(data).read_text()
        assert sorted(i for _, _, i in await read_stream(nc, work)) == sorted(queued)

        runner = await start_runner(tmp_path / "r2", nats_server.url, prefix, settings)
        await wait_for(lambda: _run_completed(nc, events, second), 60, "the second run")
        await runner.close()
        runner = None
        await asyncio.sleep(0.3)
        assert stop(proc) == 0  # finished long "ago": a third start re-queues nothing
        proc = start_role("planner", nats_server.url, prefix, data, port, **ENV)
        await wait_ready(proc, port, data)
        await wait_for(lambda: _check_done(data), 30, "the third restart check")
        assert await count(nc, work) == 0
    finally:
        stop(proc)
        if runner is not None:
            await runner.close()
        await svc.close()
    started = Counter(e.payload.segment_id for e in await events_of(nc, events, "segment.started"))
    assert {s.id: started[s.id] for s in segs} == dict.fromkeys((s.id for s in segs), 1)
    verdicts = Counter(
        (e.payload.run_id, e.payload.digest)
        for e in await events_of(nc, events, "verdict.recorded")
    )
    assert set(verdicts.values()) == {1} and len(verdicts) == 10


async def test_a_failing_restart_check_is_not_ready_backs_off_and_recovers(
    nats_server: EmbeddedNats,
    nc: FastClient,
    prefix: str,
    publisher: Publisher,
    stream_names: tuple[str, str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The active planner dies after logging a plan; the standby takes over while the work
    queue cannot be listed (a stream without direct responders — an old definition): its
    check fails, it says so in /readyz, status and its metric, retries with backoff, and
    once the stream is fixed queues the lost items and is ready."""
    work = stream_names[1]
    monkeypatch.setenv(status.INTERVAL_ENV, "0.2")
    monkeypatch.setenv("STREAMPROC_LEASE_TTL_S", "1.5")
    ports = tuple(free_ports("127.0.0.1", 2))
    systems = [
        System(
            Settings(
                configuration=env_configuration(),
                data_dir=tmp_path / f"p{i}",
                nats_url=nats_server.url,
                prefix=prefix,
                node_id=f"p{i}",
                http_port=ports[i],
            ),
            ["planner"],
        )
        for i in (0, 1)
    ]
    errors = 'scheduler_planner_errors_total{reason="recovery"}'
    before = metric(errors)
    await systems[0].start()
    try:
        await wait_for(lambda: _ready(ports[0]), 30, "the first planner")
        await systems[1].start()
        await wait_for(lambda: _ready(ports[1]), 30, "the standby")
        assert (await readyz(ports[1]) or {})["lease"] == {"planner": "standby"}
        planner = Planner(publisher, prefix)
        segs = await planner.run(TENANT, "lost-run", DIGESTS, size=2, enqueue=False)
        logged = [new_event("segment.enqueued", TENANT, s, hlc(), event_id=s.segment_id,
                            correlation_id=s.run_id) for s in segs]  # fmt: skip
        await publisher.publish_events(logged)  # as if a planner died before the work items
        info = await jsapi.stream_info(nc, work)
        assert info is not None
        await jsapi.request(nc, f"STREAM.UPDATE.{work}", {**info.config, "allow_direct": False})
        await systems.pop(0).close()  # the active one goes; the standby takes over

        async def not_ready() -> dict[str, Any] | None:
            doc = await readyz(ports[1])
            return doc if doc and "problems" in doc else None

        doc = await wait_for(not_ready, 30, "the failing check in /readyz")
        assert doc["status"] == "not ready" and doc["lease"] == {"planner": "active"}
        problem = doc["problems"]["planner"]["recovery"]
        assert "restart check failed (attempt" in problem and "no responders" in problem
        assert metric("scheduler_planner_recovery_failing") == 1

        async def degraded() -> str | None:
            code, out = await status_cli(capsys, nats_server.url, prefix, "--roles", "planner")
            return out if code == status.EXIT_UNHEALTHY and "degraded" in out else None

        out = await wait_for(degraded, 20, "status shows the planner degraded")
        assert "problem: planner p1/" in out and "restart check failed" in out
        row = next(x for x in out.splitlines() if x.startswith("planner"))
        assert row.split()[5:7] == ["degraded", "active"]

        # Another instance takes the lease: the ended term's failing check is not this
        # standby's to report — neither in /readyz nor in the gauge.
        lease = systems[0].leaders["planner"].lease
        await wait_for(lambda: take_lease(lease), 10, "the lease taken by another holder")
        await wait_for(lambda: _ready(ports[1]), 10, "a standby without the problem")
        assert (await readyz(ports[1]) or {})["lease"] == {"planner": "standby"}
        assert metric("scheduler_planner_recovery_failing") == 0
        await lease.kv.delete("planner")  # it lets go: a new term, and the check fails again
        await wait_for(not_ready, 30, "the failing check in the new term")
        assert metric("scheduler_planner_recovery_failing") == 1

        await jsapi.request(nc, f"STREAM.UPDATE.{work}", {**info.config, "allow_direct": True})
        await wait_for(lambda: _ready(ports[1]), 30, "ready again")
        assert metric("scheduler_planner_recovery_failing") == 0
        queued = [i for _, _, i in await read_stream(nc, work)]
        assert sorted(queued) == sorted(s.segment_id for s in segs)
        assert 2 <= metric(errors) - before <= 6, "backed off: not twice a second"
    finally:
        for system in systems:
            await system.close()
        await drop_status_bucket(nc, prefix)
        await drop_lease_bucket(nc, prefix)


async def _ready(port: int) -> bool:
    doc = await readyz(port)
    return bool(doc and doc.get("status") == "ready")


def metric(name: str) -> float:
    base, _, labels = name.partition("{")
    wanted = {}
    for part in labels.rstrip("}").split(","):
        if part:
            k, v = part.split("=")
            wanted[k] = v.strip('"')
    value = REGISTRY.get_sample_value(base, wanted)
    return value or 0.0


async def drop_status_bucket(nc: FastClient, prefix: str) -> None:
    with contextlib.suppress(jsapi.JsApiError):
        await jsapi.request(nc, f"STREAM.DELETE.KV_{status.bucket_name(prefix)}")
