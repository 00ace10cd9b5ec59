"""Runs over HTTP: ad-hoc requests, listings, details with stats and deltas, cancel."""

from __future__ import annotations

import asyncio

import pytest

from streamproc.events import payloads as p
from streamproc.events.envelope import new_event
from streamproc.gateway.api import writes
from streamproc.runtime.projector import Projector
from tests.gateway.harness import BASE, Harness, token
from tests.helpers import eventually

D1 = "sha256:" + "c" * 64


async def runner_emits(gw: Harness, *events: tuple[str, p.Payload]) -> int:
    """Events as the planner/runner would publish them; returns the last sequence."""
    assert gw.system.publisher is not None and gw.system.clock is not None
    acks = await gw.system.publisher.publish_events(
        [new_event(k, "acme", pl, gw.system.clock.now()) for k, pl in events]
    )
    await gw.system.contexts["gateway-test"].wait_for(acks[-1].seq, 5)
    return acks[-1].seq


async def test_request_list_read_and_deltas(gw: Harness) -> None:
    seq = await gw.last_seq()
    status, acc, h = await gw.call(
        "POST", f"{BASE}/run", tok=token(), json={"mode": "content-refresh", "reason": "new KEV"}
    )
    assert status == 202 and acc["seq"] == seq + 1
    assert h["Location"] == f"{BASE}/runs/{acc['id']}"
    status, run, _ = await gw.call(
        "POST",
        f"{BASE}/run?wait=true",
        tok=token(),
        json={"selection": {"scope": "by-namespace", "namespaces": ["prod"]}},
    )
    assert status == 201 and run["state"] == "planning" and run["trigger"] == "manual"
    assert run["links"] == {
        "self": f"{BASE}/runs/{run['id']}",
        "deltas": f"{BASE}/runs/{run['id']}/deltas",
        "exports": f"{BASE}/runs/{run['id']}/exports",
    }
    rid = run["id"]
    await runner_emits(
        gw,
        (
            "run.planned",
            p.RunPlanned(
                run_id=rid,
                trigger="manual",
                stats=p.RunStats(candidates=3, queued=3),
                segments=[p.SegmentRef(segment_id="g1", shard=0, images=3)],
            ),
        ),
        ("segment.started", p.SegmentStarted(segment_id="g1", run_id=rid, runner="w1")),
        (
            "verdict.recorded",
            p.VerdictRecorded(
                run_id=rid, segment_id="g1", digest=D1, new_criticals=1, kev_hits=["CVE-1"]
            ),
        ),
    )
    status, got, _ = await gw.call("GET", f"{BASE}/runs/{rid}", tok=token(scopes="scheduler.read"))
    assert status == 200 and got["state"] == "running"
    assert got["stats"]["candidates"] == 3 and got["stats"]["deltas"] == 1
    assert got["segments"]["total"] == 1 and got["segments"]["running"] == 1
    status, deltas, _ = await gw.call("GET", got["links"]["deltas"], tok=token())
    assert status == 200 and deltas["items"][0]["digest"] == D1
    assert deltas["items"][0]["kevHits"] == ["CVE-1"]
    status, listing, _ = await gw.call("GET", f"{BASE}/runs?state=running", tok=token())
    assert [r["id"] for r in listing["items"]] == [rid]
    status, listing, _ = await gw.call("GET", f"{BASE}/runs?limit=1", tok=token())
    assert [r["id"] for r in listing["items"]] == [rid] and listing["nextCursor"]
    status, page2, _ = await gw.call(
        "GET", f"{BASE}/runs?limit=1&cursor={listing['nextCursor']}", tok=token()
    )
    assert [r["id"] for r in page2["items"]] == [acc["id"]]
    for bad in ("state=bogus", "trigger=alien", "limit=0", "cursor=zz"):
        status, _, _ = await gw.call("GET", f"{BASE}/runs?{bad}", tok=token())
        assert status == 400, bad
    for old, new in (("requested", "planning"), ("planned", "queued")):
        status, problem, _ = await gw.call("GET", f"{BASE}/runs?state=running,{old}", tok=token())
        assert status == 400 and problem["field"] == "query.state", problem
        assert f"`{old}` is `{new}`" in problem["detail"], problem


async def test_run_refusals_publish_nothing(gw: Harness) -> None:
    seq = await gw.last_seq()
    for body in [
        {"mode": "nope"},
        {"selection": {"digests": ["not-a-digest"]}},
        {"x": 1},
        {"reason": "r" * 1001},
    ]:
        status, _, _ = await gw.call("POST", f"{BASE}/run", tok=token(), json=body)
        assert status == 400, body
    status, _, _ = await gw.call("POST", f"{BASE}/run", tok=token(scopes="scheduler.read"), json={})
    assert status == 403
    for path in (f"{BASE}/runs/nope", f"{BASE}/runs/nope/deltas"):
        status, _, _ = await gw.call("GET", path, tok=token())
        assert status == 404
    status, _, _ = await gw.call("POST", f"{BASE}/runs/nope/cancel", tok=token())
    assert status == 404
    assert await gw.last_seq() == seq


async def test_cancel_is_best_effort_and_409_once_finished(gw: Harness) -> None:
    _, run, _ = await gw.call("POST", f"{BASE}/run?wait=true", tok=token(), json={})
    rid = run["id"]
    status, got, _ = await gw.call(
        "POST",
        f"{BASE}/runs/{rid}/cancel?wait=true",
        tok=token(),
        json={"reason": "wrong selection"},
    )
    assert status == 200 and got["cancelRequested"] and got["cancelReason"] == "wrong selection"
    status, again, _ = await gw.call("POST", f"{BASE}/runs/{rid}/cancel", tok=token())
    assert status == 202, again  # a repeat is absorbed by the derived event id
    await runner_emits(gw, ("run.cancelled", p.RunCancelled(run_id=rid)))
    seq = await gw.last_seq()
    status, problem, _ = await gw.call("POST", f"{BASE}/runs/{rid}/cancel", tok=token())
    assert status == 409 and problem["reason"] == "run_finished"
    status, problem, _ = await gw.call(
        "POST",
        f"{BASE}/runs/{rid}/cancel",
        tok=token(),
        data=b"{bad",
        headers={"Content-Type": "application/json"},
    )
    assert status == 400
    assert await gw.last_seq() == seq


def hold(projector: Projector, monkeypatch: pytest.MonkeyPatch) -> asyncio.Event:
    """Hold the read model's projector before its next step until the event is set."""
    go = asyncio.Event()
    step = projector.step

    async def held(timeout: float = 1.0) -> int:
        await go.wait()
        return await step(timeout)

    monkeypatch.setattr(projector, "step", held)
    return go


async def test_a_run_in_the_log_is_found_though_the_read_model_lags(
    gw: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A client of the specification reads a run right after its 202 (or through another
    gateway): the read finds it once the read model applied what the log held, not 404.

    The read model's projector is held while the backlog is published (on a slow machine it
    would otherwise fold it all before the read, and the case would not arise), and let go
    once the read waits for it."""
    assert gw.system.publisher is not None and gw.system.clock is not None
    projector = gw.system.projectors["gateway-test"]
    go = hold(projector, monkeypatch)
    now = gw.system.clock.now()
    backlog = [
        new_event("run.requested", "acme", p.RunRequested(run_id=f"lag-{i}", trigger="manual"), now)
        for i in range(20_000)
    ]
    target = new_event(
        "run.requested", "acme", p.RunRequested(run_id="last", trigger="manual"), now
    )
    acks = await gw.system.publisher.publish_events([*backlog, target])
    assert gw.system.contexts["gateway-test"].applied() < acks[-1].seq  # it lags: the case
    read = asyncio.ensure_future(gw.call("GET", f"{BASE}/runs/last", tok=token()))
    await eventually(lambda: projector._waiters, 10, "the read waits for the read model")
    go.set()
    status, run, _ = await read
    assert status == 200 and run["id"] == "last", run
    status, doc, _ = await gw.call("GET", f"{BASE}/runs/never-requested", tok=token())
    assert status == 404, doc


async def test_a_run_applied_while_the_gateway_asks_for_the_log_head_is_found(
    gw: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The read model may apply the run between the first lookup and the answer about the
    log's head: the gateway reads again rather than answer 404."""
    assert gw.system.publisher is not None and gw.system.clock is not None
    projector = gw.system.projectors["gateway-test"]
    go = hold(projector, monkeypatch)
    # A step already under way is not held: one event it applies, and the next step waits.
    first = new_event(
        "run.requested", "acme", p.RunRequested(run_id="before", trigger="manual"),
        gw.system.clock.now(),
    )  # fmt: skip
    (before,) = await gw.system.publisher.publish_events([first])
    await projector.wait_for(before.seq, 10)
    run = new_event(
        "run.requested", "acme", p.RunRequested(run_id="raced", trigger="manual"),
        gw.system.clock.now(),
    )  # fmt: skip
    (ack,) = await gw.system.publisher.publish_events([run])
    assert gw.gateway.rm.run("acme", "raced") is None  # held: the first lookup misses it
    real = writes.jsapi.stream_info

    async def applied_meanwhile(nc: object, stream: str) -> object:
        monkeypatch.setattr(writes.jsapi, "stream_info", real)  # once: the gateway's ask
        go.set()  # the fold applies the run while the gateway asks for the head
        await projector.wait_for(ack.seq, 10)
        return await real(nc, stream)  # type: ignore[arg-type]

    monkeypatch.setattr(writes.jsapi, "stream_info", applied_meanwhile)
    status, got, _ = await gw.call("GET", f"{BASE}/runs/raced", tok=token())
    assert status == 200 and got["id"] == "raced", got
