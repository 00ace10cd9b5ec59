"""Role heartbeats and ``streamproc status`` against a real nats-server."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from streamproc import status
from streamproc.bus import jsapi
from streamproc.bus.fastclient import FastClient
from streamproc.bus.publisher import Publisher
from streamproc.cli import main
from streamproc.config import ConfigError, Settings
from streamproc.natsd.server import EmbeddedNats
from streamproc.roles import System
from streamproc.status.cli import _expected
from tests.helpers import env_configuration, eventually, publish_samples
from tests.samples import sample_event

INTERVAL = "0.2"


@pytest.fixture
async def status_bucket(nc: FastClient, prefix: str) -> AsyncIterator[str]:
    """The prefix's status bucket, deleted after the test."""
    yield status.bucket_name(prefix)
    with contextlib.suppress(jsapi.JsApiError):
        await jsapi.request(nc, f"STREAM.DELETE.KV_{status.bucket_name(prefix)}")


until = eventually


async def status_cli(
    capsys: pytest.CaptureFixture[str], url: str, prefix: str, *extra: str
) -> tuple[int, str]:
    """``streamproc status`` through the real command line (in a thread: it runs its own
    event loop), with its exit code and output."""
    capsys.readouterr()
    argv = ["status", "--nats-url", url, "--prefix", prefix, *extra]
    code = await asyncio.to_thread(main, argv)
    return code, capsys.readouterr().out


async def test_two_roles_show_their_positions_and_a_clean_stop_leaves(
    nats_server: EmbeddedNats,
    nc: FastClient,
    prefix: str,
    stream_names: tuple[str, str, str],
    publisher: Publisher,
    status_bucket: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv(status.INTERVAL_ENV, INTERVAL)
    await publish_samples(publisher, [sample_event(i) for i in range(40)])
    settings = Settings(
        configuration=env_configuration(),
        data_dir=tmp_path / "data",
        nats_url=nats_server.url,
        prefix=prefix,
    )
    system = System(settings, ["activity", "planner"], http=False)
    await system.start()
    try:

        async def caught_up() -> tuple[int, list[status.Heartbeat]] | None:
            # The sample schedules make the planner publish runs: wait for a quiet head.
            info = await jsapi.stream_info(nc, stream_names[0])
            assert info is not None
            head = info.state.last_seq
            beats = await status.read_heartbeats(nc, prefix) or []
            done = len(beats) == 2 and all(b.applied == head for b in beats)
            return (head, beats) if done and any(b.lease == "active" for b in beats) else None

        head, beats = await until(caught_up)
        assert [b.role for b in beats] == ["activity", "planner"]
        for b in beats:
            assert (b.head, b.lag, b.failure, b.pid) == (head, 0, None, os.getpid())
            assert b.stream == stream_names[0]
        assert {b.role: b.lease for b in beats} == {"activity": None, "planner": "active"}
        # The samples update runs and schedules the planner never saw created: rejected,
        # and the heartbeat carries the committed counts per projection and reason.
        rejected = system.projectors["planner"].folder.rejections
        assert rejected.get("pl_open", {}).get("unknown_run", 0) > 0
        assert {b.role: b.rejections for b in beats} == {"activity": {}, "planner": rejected}
        total = sum(n for per in rejected.values() for n in per.values())

        code, out = await status_cli(
            capsys, nats_server.url, prefix, "--roles", "activity,planner", "--json"
        )
        assert code == 0, out
        doc = json.loads(out)
        assert doc["ok"] is True and doc["head"] == head
        rows = {i["role"]: i for i in doc["instances"]}
        assert rows["planner"]["applied"] == rows["activity"]["applied"] == head
        assert {i["health"] for i in doc["instances"]} == {"ok"}

        # The four service roles are expected by default: the missing ones make it exit 1;
        # activity (only `up` runs it) is listed, never required.
        code, out = await status_cli(capsys, nats_server.url, prefix)
        assert code == status.EXIT_UNHEALTHY
        assert "problem: gateway: no running instance" in out
        assert "\nactivity " in out
        line = next(x for x in out.splitlines() if x.startswith("planner"))
        assert line.split()[2:7] == [str(head), str(head), "0", "ok", "active"]
        assert line.split()[-1] == str(total)
        shown = next(x for x in out.splitlines() if x.startswith("rejected: planner "))
        assert shown.startswith(f"rejected: planner {settings.node_id}/{os.getpid()}: ")
        assert "pl_open: " in shown and "unknown_run" in shown
        assert not any(x.startswith("rejected: activity") for x in out.splitlines())
    finally:
        await system.close()
    assert await status.read_heartbeats(nc, prefix) == []


async def test_a_killed_instance_goes_stale_then_disappears(
    nats_server: EmbeddedNats,
    nc: FastClient,
    prefix: str,
    stream_names: tuple[str, str, str],
    status_bucket: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    env = {**os.environ, status.INTERVAL_ENV: INTERVAL}
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamproc.cli", "role", "activity", "--nats-url",
         nats_server.url, "--prefix", prefix, "--data-dir", str(tmp_path / "data")],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:

        async def listed() -> list[status.Heartbeat] | None:
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            return await status.read_heartbeats(nc, prefix)

        beats = await until(listed, timeout=30)
        assert [(b.role, b.pid) for b in beats] == [("activity", proc.pid)]
    finally:
        proc.send_signal(signal.SIGKILL)  # no clean stop: the key stays behind
        proc.wait(10)
        if proc.stderr is not None:
            proc.stderr.close()

    async def health() -> str | None:
        beats = await status.read_heartbeats(nc, prefix) or []
        report = status.assess(beats, ["activity"], time.time_ns() // 1_000_000)
        return report.instances[0].health if report.instances else "gone"

    assert await health() == "ok"
    assert await until(lambda: _is(health, "stale")) == "stale"
    code, out = await status_cli(capsys, nats_server.url, prefix, "--roles", "activity")
    assert code == status.EXIT_UNHEALTHY
    assert "stale heartbeat" in out and "problem: activity" in out
    assert await until(lambda: _is(health, "gone"), timeout=15) == "gone"

    async def reported_gone() -> tuple[int, str] | None:
        # At the expiry boundary one read may still see the record another just missed.
        code, out = await status_cli(capsys, nats_server.url, prefix, "--roles", "activity")
        return (code, out) if "problem: activity: no running instance" in out else None

    code, out = await until(reported_gone, timeout=15)
    assert code == status.EXIT_UNHEALTHY


async def test_a_failed_role_says_why_and_keeps_saying_it_after_the_stop(
    nats_server: EmbeddedNats,
    nc: FastClient,
    prefix: str,
    stream_names: tuple[str, str, str],
    status_bucket: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(status.INTERVAL_ENV, INTERVAL)
    settings = Settings(
        configuration=env_configuration(),
        data_dir=tmp_path / "data",
        nats_url=nats_server.url,
        prefix=prefix,
    )
    system = System(settings, ["activity"], http=False)
    await system.start()
    try:
        # Its stream vanishes under it: the projector stops (fail closed).
        await jsapi.request(nc, f"STREAM.DELETE.{stream_names[0]}")

        async def failed() -> status.Heartbeat | None:
            beats = await status.read_heartbeats(nc, prefix) or []
            return beats[0] if beats and beats[0].failure else None

        beat = await until(failed)
        assert "ConsumerGone" in (beat.failure or "")
        report = status.assess([beat], ["activity"], beat.updated_ms)
        assert [i.health for i in report.instances] == ["failed"]
        assert report.problems[0].startswith("activity ") and "ConsumerGone" in report.problems[0]
    finally:
        await system.close()
    beats = await status.read_heartbeats(nc, prefix) or []
    assert [(b.role, bool(b.failure)) for b in beats] == [("activity", True)]


async def _is(get, want: str) -> str | None:  # type: ignore[no-untyped-def]
    got = await get()
    return got if got == want else None


def _beat(**kw: object) -> status.Heartbeat:
    base: dict[str, object] = {
        "role": "runner", "node": "n1", "pid": 7, "applied": 90, "head": 100, "lag": 10,
        "lag_limit": 50, "updated_ms": 1_000_000, "interval_s": 2.0,
    }  # fmt: skip
    return status.Heartbeat(**{**base, **kw})  # type: ignore[arg-type]


def test_health_of_an_instance() -> None:
    now = 1_000_000
    assert status.health_of(_beat(), now) == ("ok", 0.0)
    assert status.health_of(_beat(lag=51), now)[0] == "lagging"
    assert status.health_of(_beat(failure="PositionError: gap"), now)[0] == "failed"
    # stale after 3 intervals plus the clock margin, whatever else it says
    assert status.health_of(_beat(failure="x"), now + 7_001)[0] == "stale"
    assert status.health_of(_beat(), now + 6_900)[0] == "ok"


def test_assess_reports_missing_roles_and_a_lease_nobody_holds() -> None:
    beats = [
        _beat(),
        _beat(role="planner", lease="standby"),
        _beat(role="planner", pid=8, lease="catching-up"),
        _beat(role="auditor", lease="standby", updated_ms=0),
        _beat(role="auditor", pid=9, lease="active"),
    ]
    report = status.assess(beats, ["runner", "planner", "auditor", "gateway"], 1_000_000)
    assert report.missing == ["gateway"]
    assert report.inactive == ["planner"]
    assert report.problems == [
        "auditor n1/7: stale",
        "gateway: no running instance",
        "planner: no active instance (all standby)",
    ]
    assert not report.ok
    lines = status.render(report).splitlines()
    assert lines[0].split() == [
        "ROLE", "INSTANCE", "POSITION", "HEAD", "LAG", "HEALTH", "LEASE", "SEEN", "HTTP",
        "REJECTED"
    ]  # fmt: skip
    stale = next(x for x in lines if x.startswith("auditor") and "n1/7" in x)
    assert "stale heartbeat" in stale and "standby" in stale
    assert status.assess([_beat()], ["runner"], 1_000_000).ok
    # rejections are shown per projection and reason, and are not a health problem
    counts = {"runner": {"unknown_run": 2, "unknown_segment": 1}, "rm_x": {}}
    report = status.assess([_beat(lag=0, rejections=counts)], ["runner"], 1_000_000)
    assert report.ok
    out = status.render(report).splitlines()
    assert out[1].split()[-1] == "3"
    assert out[2] == "rejected: runner n1/7: runner: unknown_run 2, unknown_segment 1"
    assert status.as_json(report)["instances"][0]["rejections"] == counts


def test_settings_are_validated() -> None:
    assert status.interval_s({}) == 2.0
    assert status.interval_s({status.INTERVAL_ENV: "0.5"}) == 0.5
    for bad in ("0", "0.05", "-1", "soon", "1000"):
        with pytest.raises(ConfigError, match=status.INTERVAL_ENV):
            status.interval_s({status.INTERVAL_ENV: bad})
    with pytest.raises(ConfigError, match="unknown role"):
        _expected("planner,nonsense")
    assert _expected(None) == ["auditor", "gateway", "planner", "runner"], "activity optional"
    assert _expected("activity") == ["activity"]


async def test_status_shows_who_holds_each_planner_partition(
    nats_server: EmbeddedNats,
    nc: FastClient,
    prefix: str,
    stream_names: tuple[str, str, str],
    status_bucket: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv(status.INTERVAL_ENV, INTERVAL)
    monkeypatch.setenv("STREAMPROC_PLANNER_PARTITIONS", "2")
    monkeypatch.setenv("STREAMPROC_LEASE_TTL_S", "1")
    settings = Settings(
        configuration=env_configuration(),
        data_dir=tmp_path / "data",
        nats_url=nats_server.url,
        prefix=prefix,
        node_id="pn",
    )
    system = System(settings, ["planner"], http=False)
    await system.start()
    try:

        async def both_held() -> str | None:
            _code, out = await status_cli(capsys, nats_server.url, prefix, "--roles", "planner")
            lines = [x for x in out.splitlines() if x.startswith("planner partition")]
            return out if len(lines) == 2 and all("held by pn/" in x for x in lines) else None

        out = await until(both_held, 30)
        assert f"planner partition 0/2: held by pn/{os.getpid()}/" in out

        async def both_held_json() -> dict[str, str] | None:
            # A 1 s lease on a loaded machine can lapse between two looks and be taken
            # again at once: wait for a look that finds both held, as above.
            _code, out = await status_cli(
                capsys, nats_server.url, prefix, "--roles", "planner", "--json"
            )
            held: dict[str, str] = json.loads(out)["partitions"]  # only the held ones
            mine = all(h.startswith(f"pn/{os.getpid()}/") for h in held.values())
            return held if sorted(held) == ["0/2", "1/2"] and mine else None

        assert await until(both_held_json, 30)
    finally:
        await system.close()
    _code, out = await status_cli(capsys, nats_server.url, prefix, "--roles", "planner")
    assert "planner partition 0/2: unheld" in out and "planner partition 1/2: unheld" in out
    with contextlib.suppress(jsapi.JsApiError):
        await jsapi.request(nc, f"STREAM.DELETE.{stream_names[0]}_PLAN2")
