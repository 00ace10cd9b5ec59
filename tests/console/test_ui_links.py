"""Links the console renders from data it shows — a finding's advisory link comes from the
scanner's report — are links only for ``https:`` and ``http:`` URLs (L11); anything else
(``javascript:``, ``data:``, a relative path) is shown as text. In headless Chromium against a
real gateway, with the run and its verdict on the real event log."""

from __future__ import annotations

from pathlib import Path

import pytest

from streamproc.events import payloads as p
from streamproc.events.envelope import new_event
from streamproc.natsd.server import EmbeddedNats
from tests.console.test_ui import (  # noqa: F401 (fixtures)
    artifacts,
    browser,
    dev_gateway,
    sign_in,
    with_console,
)

pytestmark = pytest.mark.ui

RUN = "run-links"
DIGEST = "sha256:" + "ab" * 32
LINKS = {
    "CVE-2025-0001": "javascript:document.title='owned'",
    "CVE-2025-0002": "https://osv.dev/vulnerability/CVE-2025-0002",
    "CVE-2025-0003": "data:text/html,<script>alert(1)</script>",
}


async def test_only_http_and_https_finding_links_are_links(
    nats_server: EmbeddedNats,
    prefix: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    artifacts: Path,  # noqa: F811
    with_console: None,  # noqa: F811
) -> None:
    async with dev_gateway(nats_server.url, prefix, tmp_path, monkeypatch) as (system, key):
        assert system.clock is not None and system.publisher is not None
        findings = [p.Finding(purl="pkg:pypi/x@1", vuln_id=v, severity="high", link=link)
                    for v, link in LINKS.items()]  # fmt: skip
        for kind, payload in (
            ("run.requested", p.RunRequested(run_id=RUN, trigger="manual")),
            ("run.planned", p.RunPlanned(run_id=RUN, trigger="manual", segments=[
                p.SegmentRef(segment_id="s0", shard=0, images=1)])),
            ("verdict.recorded", p.VerdictRecorded(run_id=RUN, segment_id="s0", digest=DIGEST,
                                                   new_high=3, top_findings=findings)),
        ):  # fmt: skip
            ack = await system.publisher.publish_event(
                new_event(kind, "demo", payload, system.clock.now())
            )
        await system.projectors["gateway"].wait_for(ack.seq, 10)
        async with browser(artifacts) as b:
            await sign_in(b, system.http_url, key)
            await b.page.goto(f"{system.http_url}/ui#/runs/{RUN}")
            items = b.page.locator("#deltas ul.findings li")
            await items.nth(2).wait_for()
            texts = [await items.nth(i).text_content() for i in range(3)]
            assert [t is not None and t.split()[1] for t in texts] == list(LINKS)
            links = b.page.locator("#deltas ul.findings a")
            assert await links.count() == 1
            assert await links.first.get_attribute("href") == LINKS["CVE-2025-0002"]
            assert await links.first.text_content() == "CVE-2025-0002"
            hrefs = await b.page.eval_on_selector_all("a[href]", "as => as.map(a => a.href)")
            assert not [h for h in hrefs if not h.startswith(("http:", "https:"))], hrefs
            await b.shot("links")
            assert b.errors == []
