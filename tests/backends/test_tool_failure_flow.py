"""A tool that fails, end to end on the runner role: each attempt is counted in
``scheduler_runner_errors_total{reason}``, the runner reports the problem in its heartbeat
(``streamproc status`` shows it degraded), the retries run out and the image's verdict is
``failed`` with the named reason, never a PASS. Once the tool works again the next run
records its findings and the problem clears."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

from streamproc import status
from streamproc.bus.fastclient import FastClient
from streamproc.bus.publisher import Publisher
from streamproc.cli import main
from streamproc.configfile.loader import environ
from streamproc.events import payloads as p
from streamproc.events.envelope import Envelope, new_event
from streamproc.natsd.server import EmbeddedNats
from streamproc.runner.settings import load as load_runner
from streamproc.scanner.demo import DATA as DEMO
from tests.backends.conftest import DATA, install_standins
from tests.helpers import eventually
from tests.runner.harness import Planner, events, hlc, start_runner

SBOM = DEMO / "sboms" / "debian-base.cdx15.json"
DIGEST = "sha256:" + "5e" * 32


def _errors(reason: str) -> float:
    return REGISTRY.get_sample_value("scheduler_runner_errors_total", {"reason": reason}) or 0.0


async def _verdict(nc: FastClient, stream: str, run_id: str) -> Envelope | None:
    got = [e for e in await events(nc, stream, "verdict.recorded") if e.payload.run_id == run_id]
    return got[0] if got else None


async def _runner_beat(nc: FastClient, prefix: str) -> status.Heartbeat | None:
    beats = await status.read_heartbeats(nc, prefix) or []
    return next((b for b in beats if b.role == "runner"), None)


async def test_a_failing_tool_is_retried_counted_shown_and_fails_the_image(
    nats_server: EmbeddedNats,
    nc: FastClient,
    prefix: str,
    publisher: Publisher,
    stream_names: tuple[str, str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    bin_dir = install_standins(tmp_path / "bin")
    monkeypatch.setenv("STANDIN_OUTPUT", str(DATA / "grype" / "chainguard-ruby-test.json"))
    monkeypatch.setenv("STANDIN_MODE", "exit")  # exits 3: no vulnerability DB
    monkeypatch.setenv("STREAMPROC_SCANNER_KIND", "grype")
    monkeypatch.setenv("STREAMPROC_SCANNER_GRYPE_PATH", str(bin_dir / "grype"))
    monkeypatch.setenv(status.INTERVAL_ENV, "0.2")
    runner = load_runner(
        environ(), {"call_attempts": 3, "backoff_base_s": 0.01, "backoff_cap_s": 0.05}
    )
    argv = ["index", "add", "--nats-url", nats_server.url, "--prefix", prefix,
            "--tenant", "acme", "--image", DIGEST, "--repo", "ghcr.io/acme/app",
            "--sbom", str(SBOM)]  # fmt: skip
    assert await asyncio.to_thread(main, argv) == 0
    system = await start_runner(tmp_path / "data", nats_server.url, prefix, runner)
    try:
        before = _errors("exit_status")
        await Planner(publisher, prefix).run("acme", "run-1", [DIGEST])
        failed = await eventually(lambda: _verdict(nc, stream_names[0], "run-1"), 30, "verdict")
        v = failed.payload
        assert (v.status, v.scanner, v.policy_verdict, v.findings) == ("failed", "grype", None, [])
        assert v.error.startswith("exit_status: grype exited with 3: grype: failed to load")
        assert v.error.endswith("(after 3 attempts)")
        assert _errors("exit_status") - before == 3

        async def degraded() -> status.Report | None:
            beat = await _runner_beat(nc, prefix)
            if beat is None or not beat.problems:
                return None
            return status.assess([beat], ["runner"], int(time.time() * 1000))

        report = await eventually(degraded, 10, "the runner's heartbeat names the problem")
        assert [i.health for i in report.instances] == ["degraded"]
        (problem,) = report.problems
        assert "scanner: grype: exit_status: grype exited with 3" in problem
        assert "problem: runner " in status.render(report)

        monkeypatch.delenv("STANDIN_MODE")  # the DB is there now
        await Planner(publisher, prefix).run("acme", "run-2", [DIGEST])
        ok = await eventually(lambda: _verdict(nc, stream_names[0], "run-2"), 30, "verdict")
        assert ok.payload.status == "ok" and ok.payload.findings
        assert ok.payload.revision.startswith("grype-db v5")

        async def cleared() -> bool:
            beat = await _runner_beat(nc, prefix)
            return beat is not None and beat.updated_ms > 0 and not beat.problems

        await eventually(cleared, 10, "the problem cleared")
    finally:
        await system.close()


async def test_what_a_tool_kind_cannot_answer_fails_the_image_at_once_naming_why(
    nats_server: EmbeddedNats,
    nc: FastClient,
    prefix: str,
    publisher: Publisher,
    stream_names: tuple[str, str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A content-refresh segment, an image indexed without its SBOM kept, and an image
    removed after its run was planned: each a failed verdict with its reason, and no tool
    call (retrying cannot help)."""
    bin_dir = install_standins(tmp_path / "bin")
    monkeypatch.setenv("STANDIN_OUTPUT", str(DATA / "grype" / "ghsa-test.json"))
    monkeypatch.setenv("STANDIN_LOG", str(tmp_path / "calls.jsonl"))
    monkeypatch.setenv("STREAMPROC_SCANNER_KIND", "grype")
    monkeypatch.setenv("STREAMPROC_SCANNER_GRYPE_PATH", str(bin_dir / "grype"))
    kept, bare, gone = ("sha256:" + c * 64 for c in "abc")
    common = ["--nats-url", nats_server.url, "--prefix", prefix, "--tenant", "acme",
              "--repo", "ghcr.io/acme/app"]  # fmt: skip
    for digest in (kept, gone):
        argv = ["index", "add", *common, "--image", digest, "--sbom", str(SBOM)]
        assert await asyncio.to_thread(main, argv) == 0
    argv = ["index", "remove", *common[:6], "--image", gone]
    assert await asyncio.to_thread(main, argv) == 0
    # A producer that does not keep SBOMs: image.indexed without `sbom`.
    payload = p.ImageIndexed(digest=bare, registry="ghcr.io", repository="acme/app")
    await publisher.publish_event(new_event("image.indexed", "acme", payload, hlc()))
    system = await start_runner(tmp_path / "data", nats_server.url, prefix, load_runner(environ()))
    try:
        planner = Planner(publisher, prefix)
        await planner.run("acme", "refresh", [kept], mode="content-refresh")
        await planner.run("acme", "analysis", [bare, gone])

        async def verdicts() -> dict[str, str] | None:
            got = {e.payload.digest + e.payload.run_id: e.payload.error or ""
                   for e in await events(nc, stream_names[0], "verdict.recorded")}  # fmt: skip
            return got if len(got) == 3 else None

        got = await eventually(verdicts, 30, "three verdicts")
        assert got[kept + "refresh"].startswith("content_refresh_unsupported: scanner.kind=grype")
        assert got[bare + "analysis"].startswith("sbom_not_kept: image " + bare)
        assert got[gone + "analysis"].startswith("image_not_indexed: image " + gone)
        assert not (tmp_path / "calls.jsonl").exists(), "no tool was run"
    finally:
        await system.close()
