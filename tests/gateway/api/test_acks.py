"""Acknowledging a run's delta over HTTP: recorded, read, shown beside the delta, replaced;
every refusal a precise problem that publishes nothing."""

from __future__ import annotations

from streamproc.events import payloads as p
from tests.gateway.api.test_runs import runner_emits
from tests.gateway.harness import BASE, Harness, token

D1 = "sha256:" + "c" * 64
D2 = "sha256:" + "d" * 64
READ = "scheduler.read"


async def run_with_delta(gw: Harness) -> str:
    """A run whose image D1 got worse and whose image D2 did not."""
    _, run, _ = await gw.call("POST", f"{BASE}/run?wait=true", tok=token(), json={})
    rid: str = run["id"]
    await runner_emits(
        gw,
        (
            "run.planned",
            p.RunPlanned(
                run_id=rid,
                trigger="manual",
                segments=[p.SegmentRef(segment_id="g1", shard=0, images=2)],
            ),
        ),
        ("segment.started", p.SegmentStarted(segment_id="g1", run_id=rid, runner="w1")),
        ("verdict.recorded", p.VerdictRecorded(run_id=rid, segment_id="g1", digest=D1, new_high=2)),
        ("verdict.recorded", p.VerdictRecorded(run_id=rid, segment_id="g1", digest=D2)),
    )
    return rid


async def test_acknowledge_read_list_and_replace(gw: Harness) -> None:
    rid = await run_with_delta(gw)
    url = f"{BASE}/runs/{rid}/deltas/{D1}/acknowledgement"
    status, problem, h = await gw.call("GET", url, tok=token(scopes=READ))
    assert status == 404 and h["Content-Type"].startswith("application/problem+json")
    assert problem["detail"] == f"nobody acknowledged image {D1} in run {rid}"

    body = {"note": "fixed in the next base image", "ticket": "SEC-1"}
    status, ack, h = await gw.call("PUT", url + "?wait=true", tok=token(), json=body)
    assert status == 200, ack
    assert h["Location"] == url
    assert ack["runId"] == rid and ack["digest"] == D1
    assert (ack["acknowledgedBy"], ack["note"], ack["ticket"]) == ("tester", body["note"], "SEC-1")
    assert ack["acknowledgedAt"].endswith("Z") and ack["eventId"]

    status, got, _ = await gw.call("GET", url, tok=token(scopes=READ))
    assert status == 200 and got == ack
    status, deltas, _ = await gw.call("GET", f"{BASE}/runs/{rid}/deltas", tok=token(scopes=READ))
    assert status == 200 and [d["digest"] for d in deltas["items"]] == [D1]
    assert deltas["items"][0]["acknowledgement"] == ack

    seq = await gw.last_seq()
    status, again, h = await gw.call("PUT", url, tok=token(), json=body)
    assert status == 200 and again == ack and h["Location"] == url, again
    assert await gw.last_seq() == seq, "the one in force again records nothing"

    status, later, _ = await gw.call(
        "PUT", url + "?wait=true", tok=token(sub="oncall"), json={"ticket": "SEC-2"}
    )
    assert status == 200 and (later["acknowledgedBy"], later["note"], later["ticket"]) == (
        "oncall",
        None,
        "SEC-2",
    )
    status, got, _ = await gw.call("GET", url, tok=token(scopes=READ))
    assert got == later
    status, back, _ = await gw.call("PUT", url + "?wait=true", tok=token(), json=body)
    assert status == 200 and back["acknowledgedBy"] == "tester" and back["ticket"] == "SEC-1"
    assert back["eventId"] != ack["eventId"], "the first one again, over another, applies"


async def test_refusals_are_precise_problems_and_publish_nothing(gw: Harness) -> None:
    rid = await run_with_delta(gw)
    url = f"{BASE}/runs/{rid}/deltas/{D1}/acknowledgement"
    seq = await gw.last_seq()
    cases: list[tuple[str, str, dict[str, object], int, str | None]] = [
        (f"{BASE}/runs/{rid}/deltas/sha256:XYZ/acknowledgement", token(), {}, 400, "path.digest"),
        (url, token(), {"note": "n" * 1001}, 400, "$.note"),
        (url, token(), {"ticket": ""}, 400, "$.ticket"),
        (url, token(), {"ticket": "t" * 201}, 400, "$.ticket"),
        (url, token(), {"acknowledged": True}, 400, None),
        (url + "?wait=maybe", token(), {}, 400, "query.wait"),
        (url, token(scopes=READ), {}, 403, None),
        (f"{BASE}/runs/nope/deltas/{D1}/acknowledgement", token(), {}, 404, None),
        (f"{BASE}/runs/{rid}/deltas/{D2}/acknowledgement", token(), {}, 404, None),
        (url, token(tenant="other"), {}, 404, None),
    ]
    for path, tok, body, want, field in cases:
        status, problem, h = await gw.call("PUT", path, tok=tok, json=body)
        assert status == want, (path, body, problem)
        assert h["Content-Type"].startswith("application/problem+json"), (path, body)
        if field is not None:
            assert problem["field"] == field, problem
    status, problem, _ = await gw.call(
        "PUT", f"{BASE}/runs/{rid}/deltas/{D2}/acknowledgement", tok=token(), json={}
    )
    assert problem["detail"] == f"image {D2} is not a delta of run {rid}"
    for raw in (b"{bad", b""):
        status, _, h = await gw.call(
            "PUT", url, tok=token(), data=raw, headers={"Content-Type": "application/json"}
        )
        assert status == 400 and h["Content-Type"].startswith("application/problem+json"), raw
    status, _, _ = await gw.call(
        "PUT", url, tok=token(), data=b"{}", headers={"Content-Type": "text/plain"}
    )
    assert status == 415
    status, _, _ = await gw.call("PUT", url, tok=None, json={})
    assert status == 401
    assert await gw.last_seq() == seq

    for path in (url, f"{BASE}/runs/nope/deltas/{D1}/acknowledgement"):
        status, _, _ = await gw.call("GET", path, tok=token(scopes=READ))
        assert status == 404, path
    status, problem, _ = await gw.call(
        "GET", f"{BASE}/runs/{rid}/deltas/nope/acknowledgement", tok=token(scopes=READ)
    )
    assert status == 400 and problem["field"] == "path.digest"
