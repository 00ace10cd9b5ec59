"""End to end on a real nats-server and the reference scanner over real HTTP: segments →
verdicts → exactly the expected rescan.delta events, report.ready for the rest, one run
summary and one terminal event per run."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from streamproc.bus.fastclient import FastClient
from streamproc.bus.publisher import Publisher
from streamproc.events import payloads as p
from streamproc.natsd.server import EmbeddedNats
from streamproc.notify import messages as nm
from streamproc.runner.settings import RunnerSettings
from tests.runner.harness import (
    SBOMS,
    Planner,
    add_advisory,
    digest_of,
    events,
    notify_messages,
    per_digest,
    register_images,
    register_sbom_text,
    scanner,
    start_runner,
    wait_until,
)

PY1, PY2, TOOLS = digest_of("py1"), digest_of("py2"), digest_of("tools")
BASE, LIBS, OLD = digest_of("base"), digest_of("libs"), digest_of("debian-12.0-base")
ALL = [PY1, PY2, TOOLS, BASE, LIBS, OLD]


def old_debian_base() -> bytes:
    """The real debian-base SBOM with libc-bin at 2.36-9, the version Debian 12.0 shipped
    (before DSA-5514-1): an image built in mid-2023 and never rebuilt."""
    doc = (SBOMS / "debian-base.cdx15.json").read_text()
    assert "libc-bin@2.36-9%2Bdeb12u14" in doc
    return doc.replace("libc-bin@2.36-9%2Bdeb12u14", "libc-bin@2.36-9").encode()


async def test_export_turns_into_exactly_the_expected_deltas(
    nats_server: EmbeddedNats,
    nc: FastClient,
    prefix: str,
    publisher: Publisher,
    stream_names: tuple[str, str, str],
    tmp_path: Path,
) -> None:
    events_stream, _, notify_stream = stream_names
    svc = await scanner(["GHSA-r9hx-vwmv-q579", "GHSA-5h86-8mv2-jq9f", "DSA-5497-1"])
    register_images(
        svc,
        {
            PY1: "python-app.spdx23.json",
            PY2: "python-app.spdx23.json",
            TOOLS: "tools-nested.cdx16.json",
            BASE: "debian-base.cdx15.json",
            LIBS: "debian-libs.spdx22.json",
        },
    )
    register_sbom_text(svc, OLD, old_debian_base())
    runner = await start_runner(
        tmp_path, nats_server.url, prefix, RunnerSettings(scanner_url=svc.url, workers=2)
    )
    planner = Planner(publisher, prefix)
    try:
        await planner.schedule("acme", "nightly", p.NotifyRule())
        await planner.schedule(
            "globex", "strict", p.NotifyRule(min_severity="critical", include_kev=False)
        )
        # Run 1: the baseline. First verdicts: every finding is new.
        await planner.run("acme", "run-1", ALL, size=4, schedule_id="nightly")

        async def finished(run_id: str, tenant: str = "acme") -> bool:
            done = await events(nc, events_stream, "run.completed")
            return any(e.payload.run_id == run_id and e.tenant == tenant for e in done)

        await wait_until(lambda: finished("run-1"))

        # The Feedser export brings three advisories; run 2 re-evaluates the same images.
        for name in ("GHSA-cx63-2mw6-8hw5", "GHSA-5rjg-fvgr-3xxf", "DSA-5514-1"):
            await add_advisory(svc, name)
        await planner.run("acme", "run-2", ALL, size=4, schedule_id="nightly")
        await planner.run("globex", "run-g", ALL, size=6, schedule_id="strict")
        await wait_until(lambda: finished("run-2"))
        await wait_until(lambda: finished("run-g", "globex"))

        msgs = await notify_messages(nc, notify_stream)
        by_run: dict[str, list[nm.AnyMessage]] = {}
        for m in msgs:
            by_run.setdefault(m.run_id, []).append(m)

        def kinds(run_id: str) -> dict[str, set[str]]:
            out: dict[str, set[str]] = {}
            for m in by_run[run_id]:
                if not isinstance(m, nm.RunSummary):
                    out.setdefault(nm.kind_of(m), set()).add(m.image_digest)
            return out

        assert kinds("run-1") == {
            "rescan.delta": {PY1, PY2, TOOLS},
            "report.ready": {BASE, LIBS, OLD},
        }
        assert kinds("run-2") == {
            "rescan.delta": {PY1, PY2, TOOLS, OLD},
            "report.ready": {BASE, LIBS},
        }
        assert kinds("run-g") == {"report.ready": set(ALL)}, "only highs: below minSeverity"
        assert len(by_run["run-2"]) == 7 and len(msgs) == len({m.id for m in msgs})

        deltas = {m.image_digest: m for m in by_run["run-2"] if isinstance(m, nm.RescanDelta)}
        assert deltas[PY1].new_high == 2 and deltas[PY1].new_criticals == 0
        assert {f.vuln_id for f in deltas[PY1].top_findings} == {
            "GHSA-cx63-2mw6-8hw5",
            "GHSA-5rjg-fvgr-3xxf",
        }
        assert deltas[OLD].kev_hits == ["CVE-2023-4911"]
        assert deltas[OLD].top_findings[0].purl == "pkg:deb/debian/libc-bin@2.36-9?arch=amd64"
        assert deltas[PY1].tenant == "acme" and deltas[PY1].report_url
        assert deltas[PY1].schedule_ids == ["nightly"]

        summary = [m for m in by_run["run-2"] if isinstance(m, nm.RunSummary)]
        assert len(summary) == 1 and summary[0].state == "completed"
        vulns = summary[0].vulnerabilities
        assert vulns[0].vuln_id == "DSA-5514-1" and vulns[0].kev and vulns[0].images == [OLD]
        assert {v.vuln_id: v.image_count for v in vulns[1:]} == {
            "GHSA-cx63-2mw6-8hw5": 3,
            "GHSA-5rjg-fvgr-3xxf": 3,
        }
        assert summary[0].totals.deltas == 4

        verdicts = await events(nc, events_stream, "verdict.recorded")
        for run_id in ("run-1", "run-2", "run-g"):
            mine = [v for v in verdicts if v.payload.run_id == run_id]
            assert per_digest(mine) == Counter(dict.fromkeys(ALL, 1)), run_id
        done = [e for e in await events(nc, events_stream, "run.completed")]
        assert Counter(e.payload.run_id for e in done) == {"run-1": 1, "run-2": 1, "run-g": 1}
        r2 = next(e.payload for e in done if e.payload.run_id == "run-2")
        assert (r2.stats.completed, r2.stats.failed, r2.stats.deltas) == (6, 0, 4)
        assert r2.coverage.evaluated == 6 and r2.coverage.not_evaluated == 0
        segs = await events(nc, events_stream, "segment.completed")
        usage = [s.payload.usage for s in segs if s.payload.run_id == "run-2"]
        assert len(usage) == 2 and all(u.scanner_p95_ms > 0 for u in usage)
    finally:
        await runner.close()
        await svc.close()
