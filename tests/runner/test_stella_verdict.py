"""The ``stella`` kind: a ``/reports`` service that decides PASS/FAIL itself has its verdict
and policy revision recorded as it sent them; one that sends findings only is decided by
the runner's policy (real HTTP over loopback, the runner's own client and verdict code)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web

from streamproc.backends.findings import KevCatalog, Policy
from streamproc.events import payloads as p
from streamproc.hlc import Timestamp
from streamproc.natsd.server import free_port
from streamproc.runner.backend import StellaBackend, settled
from streamproc.runner.scanner_client import ScannerClient
from streamproc.runner.verdict import ImageJob, decide

DIGEST = "sha256:" + "cd" * 32
CRITICAL = {"purl": "pkg:deb/debian/glibc@2.36-9", "vulnId": "CVE-2023-4911",
            "severity": "critical"}  # fmt: skip


@pytest.fixture
async def reports() -> AsyncIterator[tuple[str, dict[str, Any]]]:
    """A ``/reports`` service answering whatever the test puts in the dict."""
    answer: dict[str, Any] = {}

    async def post(request: web.Request) -> web.Response:
        body = await request.json()
        return web.json_response({"imageDigest": body["imageDigest"], **answer})

    app = web.Application()
    app.router.add_post("/reports", post)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    yield f"http://127.0.0.1:{port}", answer
    await runner.cleanup()


async def _recorded(url: str) -> Any:
    backend = StellaBackend(ScannerClient(url, attempts=1))
    try:
        got = await backend.answer("acme", DIGEST, "k1", refresh=False)
    finally:
        await backend.close()
    report = settled(got.report, KevCatalog(None), Policy("high"))
    job = ImageJob("acme", "run-1", "seg-1", DIGEST, "cause-1", (), p.NotifyRule())
    return decide(job, report, None, Timestamp(1, 0, "n"), "stella").verdict.payload


async def test_the_backends_own_verdict_is_recorded_as_it_sent_it(
    reports: tuple[str, dict[str, Any]],
) -> None:
    url, answer = reports
    answer.update(findings=[CRITICAL], verdict="PASS", policyRevision="policy-2026.08#14")
    v = await _recorded(url)
    assert (v.policy_verdict, v.policy_revision) == ("PASS", "policy-2026.08#14")
    assert [f.vuln_id for f in v.findings] == ["CVE-2023-4911"]  # the findings still count


async def test_without_a_verdict_the_runners_policy_decides(
    reports: tuple[str, dict[str, Any]],
) -> None:
    url, answer = reports
    answer.update(findings=[CRITICAL])
    v = await _recorded(url)
    assert (v.policy_verdict, v.policy_revision) == ("FAIL", "failOn=high;kev=none")
