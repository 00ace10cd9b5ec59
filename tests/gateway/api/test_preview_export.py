"""The preview of a Feedser or Vexer export, as the specification's UI asks ("This Feedser
export touches ~3,214 images; projected deltas: ~420 (34 KEV)"): by its body or by the
exportId of a recorded one (its latest revision), through the gateway to the real planner
role over NATS, judged against each image's last verdict."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import msgspec
import pytest

from streamproc import roles
from streamproc.events import payloads as p
from streamproc.events.envelope import new_event
from streamproc.hlc import wall_ms
from streamproc.natsd.server import EmbeddedNats
from streamproc.sbom.purls import normalize_image_purls
from tests.gateway.conftest import drop_streams
from tests.gateway.harness import (
    BASE,
    Harness,
    default_settings,
    signed_headers,
    start,
    stop,
    token,
)
from tests.helpers import eventually

URL = f"{BASE}/preview/impact"
FEEDSER = f"{BASE}/events/feedser-export"
SETUPTOOLS, ZLIB, LEFTPAD = "pkg:pypi/setuptools", "pkg:deb/debian/zlib", "pkg:npm/left-pad"
PURLS = {SETUPTOOLS: "pkg:pypi/setuptools@65.5.0", ZLIB: "pkg:deb/debian/zlib@1.2.13",
         LEFTPAD: "pkg:npm/left-pad@1.3.0"}  # fmt: skip


def image(n: int) -> str:
    return f"sha256:{n:064x}"


def key_of(n: int) -> str:
    return SETUPTOOLS if n < 6 else ZLIB if n < 12 else LEFTPAD


LAST_VERDICTS: dict[int, list[tuple[str, p.Severity, bool]]] = {
    0: [("GHSA-A", "critical", False)],  # has it already: no delta
    1: [("GHSA-A", "medium", False)],  # critical now: worse
    3: [("GHSA-OTHER", "high", False)],
    6: [("CVE-K", "low", True)],  # KEV already: no delta
    7: [("CVE-K", "low", False)],  # KEV now: worse
}
"""Images 2, 4, 5 and 8-11 were never evaluated: every finding is new to them."""

FEEDSER_EXPORT = {
    "exportId": "fx-1",
    "changedProductKeys": [SETUPTOOLS, ZLIB, LEFTPAD],
    "kev": ["CVE-K"],
    "advisories": [
        {"vulnId": "GHSA-A", "productKeys": [SETUPTOOLS], "severity": "critical",
         "epss": {"score": 0.61, "percentile": 0.97}},  # high EPSS (planner default: 0.9)
        {"vulnId": "CVE-K", "productKeys": [ZLIB], "severity": "low",
         "epss": {"score": 0.02, "percentile": 0.5}},
    ],
}  # fmt: skip


@pytest.fixture
async def planned(tmp_path: Path, nats_server: EmbeddedNats, prefix: str) -> AsyncIterator[Harness]:
    """A gateway and a planner role; 13 images of acme and some last verdicts."""
    h = await start(tmp_path, nats_server.url, prefix, default_settings(tmp_path),
                    also=("planner",))  # fmt: skip
    try:
        await seed(h)
        yield h
    finally:
        await stop(h)
        roles.ROLES.pop("gateway-test", None)
        await drop_streams(nats_server.url, prefix)


async def seed(h: Harness) -> None:
    """The 13 images and the last verdicts, folded by the planner."""
    publisher = h.system.publisher
    assert publisher is not None
    events = []
    for n in range(13):
        comps = [p.Component(purl=x.purl, product_key=x.product_key, used=True)
                 for x in normalize_image_purls([PURLS[key_of(n)]])]  # fmt: skip
        payload = p.ImageIndexed(digest=image(n), registry="r.local", repository=f"app{n}",
                                 components=comps, usage_known=True)  # fmt: skip
        events.append(new_event("image.indexed", "acme", payload, f"{wall_ms()}:0:t"))
    for n, findings in LAST_VERDICTS.items():
        verdict = p.VerdictRecorded(
            run_id="earlier", segment_id="s", digest=image(n),
            findings=[p.Finding(purl=PURLS[key_of(n)], vuln_id=v, severity=sev, kev=kev)
                      for v, sev, kev in findings],
        )  # fmt: skip
        events.append(new_event("verdict.recorded", "acme", verdict, f"{wall_ms()}:0:t"))
    await publisher.publish_events(events)
    await h.system.projectors["planner"].wait_for(await h.last_seq(), 10)


async def preview(h: Harness, body: dict, tenant: str = "acme") -> tuple[int, dict]:  # type: ignore[type-arg]
    status, res, _ = await h.call("POST", URL, tok=token(tenant, "scheduler.read"), json=body)
    return status, res


async def test_an_exports_body_is_previewed_with_its_projected_deltas(planned: Harness) -> None:
    seq = await planned.last_seq()
    status, res = await preview(planned, {"feedserExport": FEEDSER_EXPORT, "sampleSize": 20})
    assert status == 200, res
    assert res["count"] == 13 and sorted(res["sample"]) == [image(n) for n in range(13)]
    assert res["export"] == {"kind": "feedser", "exportId": "fx-1"}
    # setuptools: 1-5 (0 has GHSA-A critical already); zlib, KEV: 7-11 (6 had it as KEV).
    assert (res["projectedDeltas"], res["projectedKev"]) == (10, 5), res
    assert res["projectedHighEpss"] == 5, "setuptools' GHSA-A, apart from zlib's KEV"
    assert res["unassessed"] == 1, "left-pad: a bare key, no severity"
    assert res["projectedFrom"] == 13
    # Within a selection: the same rules, fewer candidates.
    sel = {"digests": [image(0), image(1), image(7)]}
    status, res = await preview(planned, {"feedserExport": FEEDSER_EXPORT, "selection": sel})
    assert (res["count"], res["projectedDeltas"], res["projectedKev"]) == (3, 2, 1), res
    assert res["projectedHighEpss"] == 1, res
    assert await planned.last_seq() == seq, "a preview never publishes"


async def test_a_recorded_export_is_previewed_by_its_id_at_its_latest_revision(
    planned: Harness,
) -> None:
    raw = msgspec.json.encode(FEEDSER_EXPORT)
    status, res, _ = await planned.call("POST", FEEDSER, data=raw, headers=signed_headers(raw))
    assert status == 202, res
    await planned.system.contexts["gateway-test"].wait_for(await planned.last_seq(), 5)
    status, res = await preview(planned, {"exportId": "fx-1"})
    assert status == 200, res
    assert res["export"] == {"kind": "feedser", "exportId": "fx-1", "source": "feedser-main",
                             "revision": 1}  # fmt: skip
    assert (res["count"], res["projectedDeltas"], res["projectedKev"]) == (13, 10, 5)
    # Image 2 is evaluated after the export arrived (by its run, say), with no finding of it
    # (its setuptools is not an affected version): judged already, no longer projected.
    after = p.VerdictRecorded(run_id="later", segment_id="s", digest=image(2))
    assert planned.system.publisher is not None
    await planned.system.publisher.publish_event(
        new_event("verdict.recorded", "acme", after, f"{wall_ms() + 1}:0:t")
    )
    await planned.system.projectors["planner"].wait_for(await planned.last_seq(), 10)
    status, res = await preview(planned, {"exportId": "fx-1"})
    assert (res["count"], res["projectedDeltas"], res["projectedKev"]) == (13, 9, 5), res
    # A corrected body (revision 2: GHSA-A withdrawn): the preview follows the last one.
    corrected = {**FEEDSER_EXPORT, "advisories": FEEDSER_EXPORT["advisories"][1:],
                 "changedProductKeys": [ZLIB]}  # fmt: skip
    raw = msgspec.json.encode(corrected)
    status, res, _ = await planned.call("POST", FEEDSER, data=raw, headers=signed_headers(raw))
    assert status == 202 and res["revision"] == 2, res
    await planned.system.contexts["gateway-test"].wait_for(await planned.last_seq(), 5)
    status, res = await preview(planned, {"exportId": "fx-1", "source": "feedser-main"})
    assert res["export"]["revision"] == 2 and res["count"] == 6, res
    assert (res["projectedDeltas"], res["projectedKev"]) == (5, 5)
    # Another tenant's preview does not see it; questions that cannot be answered are clear.
    status, problem = await preview(planned, {"exportId": "fx-1"}, tenant="globex")
    assert status == 404, problem
    for body, code, field in [
        ({"exportId": "nope"}, 404, None),
        ({"exportId": "fx-1", "source": "vexer-main"}, 404, None),
        ({"exportId": "fx-1", "productKeys": [ZLIB]}, 400, "$.exportId"),
        ({"feedserExport": FEEDSER_EXPORT, "vexerExport": {"exportId": "v"}}, 400,
         "$.vexerExport"),
        ({"source": "feedser-main"}, 400, "$.source"),
        ({"feedserExport": {"exportId": "x", "bogus": 1}}, 400, "$.feedserExport.bogus"),
    ]:  # fmt: skip
        status, problem = await preview(planned, body)
        assert status == code, (body, problem)
        if field:
            assert problem["field"] == field, problem


async def test_a_vexer_export_is_judged_by_the_flags_feedser_exports_gave(
    planned: Harness,
) -> None:
    raw = msgspec.json.encode(FEEDSER_EXPORT)  # flags CVE-K as KEV for the tenant
    status, _, _ = await planned.call("POST", FEEDSER, data=raw, headers=signed_headers(raw))
    assert status == 202
    await planned.system.projectors["planner"].wait_for(await planned.last_seq(), 10)
    claims = [
        {"productKey": SETUPTOOLS, "vulnId": "GHSA-A", "status": "affected→not_affected"},
        {"productKey": ZLIB, "vulnId": "CVE-K", "status": "not_affected→affected"},
    ]
    status, res = await preview(planned, {"vexerExport": {"exportId": "v1",
                                                          "changedClaims": claims}})  # fmt: skip
    assert status == 200, res
    assert res["export"] == {"kind": "vexer", "exportId": "v1"}
    assert (res["count"], res["projectedDeltas"], res["projectedKev"]) == (12, 5, 5), res
    assert res["projectedHighEpss"] == 0, "CVE-K's EPSS percentile is 0.5"
    assert res["unassessed"] == 0, "a claim that is not →affected makes nothing worse"
    # A claim back to affected on GHSA-A: critical with a high EPSS, as the export gave it.
    back = [{"productKey": SETUPTOOLS, "vulnId": "GHSA-A", "status": "not_affected→affected"}]
    status, res = await preview(planned, {"vexerExport": {"exportId": "v3",
                                                          "changedClaims": back}})  # fmt: skip
    assert status == 200, res
    got = (res["count"], res["projectedDeltas"], res["projectedKev"], res["projectedHighEpss"])
    assert got == (6, 5, 0, 5), res
    unknown = [{"productKey": SETUPTOOLS, "vulnId": "CVE-NEW", "status": "fixed→affected"}]
    status, res = await preview(planned, {"vexerExport": {"exportId": "v2",
                                                          "changedClaims": unknown}})  # fmt: skip
    assert (res["count"], res["projectedDeltas"], res["unassessed"]) == (6, 0, 6), res


async def test_work_spilled_to_the_next_window_is_the_backlog(
    tmp_path: Path, nats_server: EmbeddedNats, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Oversubscription: a run whose images exceed its maxJobs queues the first ones and
    spills the rest to a continuation in the next window; GET /backlog (the console's
    banner) shows them, by the continuation the planner itself will request."""
    monkeypatch.setenv("STREAMPROC_PLANNER_MAX_JOBS_PER_RUN", "5")
    monkeypatch.setenv("STREAMPROC_PLANNER_SPILL_DELAY_S", "3600")
    monkeypatch.setenv("STREAMPROC_PLANNER_DEBOUNCE_S", "0")
    h = await start(tmp_path, nats_server.url, prefix, default_settings(tmp_path),
                    also=("planner",))  # fmt: skip
    try:
        await seed(h)
        tok = token("acme", "scheduler.read")
        status, res, _ = await h.call("GET", f"{BASE}/backlog", tok=tok)
        assert (status, res) == (200, {"images": 0, "runs": []})
        schedule = p.ScheduleCreated(schedule_id="s1", name="s1", cron="0 2 * * *",
                                     timezone="UTC", subscriptions=["feedser"])  # fmt: skip
        assert h.system.publisher is not None
        await h.system.publisher.publish_event(
            new_event("schedule.created", "acme", schedule, f"{wall_ms()}:0:t")
        )
        raw = msgspec.json.encode(FEEDSER_EXPORT)
        status, _, _ = await h.call("POST", FEEDSER, data=raw, headers=signed_headers(raw))
        assert status == 202
        pending = h.system.contexts["planner"].shared["pl_runs"]
        await eventually(lambda: pending.backlog, 10, "the surplus in the planner's backlog")  # type: ignore[attr-defined]
        await h.system.contexts["gateway-test"].wait_for(await h.last_seq(), 5)
        status, res, _ = await h.call("GET", f"{BASE}/backlog", tok=tok)
        assert status == 200 and res["images"] == 8, res
        (run,) = res["runs"]
        assert run["spilled"] == 8 and run["runId"] == run["rootRunId"]
        assert [run["continuationRunId"]] == [r for _, r in pending.backlog]  # type: ignore[attr-defined]
        status, res, _ = await h.call("GET", f"{BASE}/backlog", tok=token("globex"))
        assert res == {"images": 0, "runs": []}, "the caller's tenant only"
    finally:
        await stop(h)
        roles.ROLES.pop("gateway-test", None)
        await drop_streams(nats_server.url, prefix)
