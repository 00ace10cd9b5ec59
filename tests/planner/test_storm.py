"""An export storm through the real gateway into the real planner (NATS, RocksDB, HTTP over
loopback, the default 30 s coalescing window): the first export is planned at once; an
identical re-delivery is a duplicate; a corrected body under the same exportId is the next
revision, and its run — a follow-up — plans only what the first run did not cover; two
revisions of an export that arrive within one window are planned as the last of them."""

from __future__ import annotations

import time
from pathlib import Path

import msgspec

from streamproc import roles
from streamproc.bus.fastclient import FastClient
from streamproc.bus.publisher import Publisher
from streamproc.events.envelope import new_event
from streamproc.hlc import wall_ms
from streamproc.ids import export_run_id
from streamproc.impact.index import ImpactIndex
from streamproc.natsd.server import EmbeddedNats
from streamproc.planner.model import StaticSource
from streamproc.planner.settings import PlannerSettings
from tests.gateway.harness import BASE, default_settings, signed_headers, start, stop, token
from tests.planner.harness import PlannerProcess, events_of, wait_until
from tests.planner.util import add_images, created, digest, lib

FEEDSER = f"{BASE}/events/feedser-export"
TENANT = "acme"
A, B, C, D = (lib(k) for k in range(4))


def body(export_id: str, keys: list[str]) -> bytes:
    return msgspec.json.encode({"exportId": export_id, "changedProductKeys": keys})


def ref(export_id: str) -> str:
    return f"feedser-main:{export_id}"


def images_with(key: str) -> set[str]:
    return {digest(TENANT, n) for n in range(40) if lib(n % 4) == key}


async def test_an_export_storm_through_the_gateway_keeps_the_last_revision(
    nc: FastClient,
    publisher: Publisher,
    prefix: str,
    stream_names: tuple[str, str, str],
    state_dir: Path,
    tmp_path: Path,
    nats_server: EmbeddedNats,
) -> None:
    events = stream_names[0]
    index = ImpactIndex()
    add_images(index, TENANT, 40, keys_of=lambda n: [lib(n % 4)])
    cfg = PlannerSettings()
    assert cfg.debounce_s == 30
    ahead = [0]
    gw = await start(tmp_path, nats_server.url, prefix, default_settings(tmp_path))
    planner = await PlannerProcess(
        nc, publisher, prefix, state_dir, StaticSource(index), cfg,
        wall=lambda: wall_ms() + ahead[0],
    ).start()  # fmt: skip
    reactor = planner.reactors[0]
    assert planner.ctx is not None and planner.proj is not None
    runs = planner.ctx.shared["pl_runs"]

    async def post(raw: bytes) -> tuple[int, dict]:  # type: ignore[type-arg]
        status, res, _ = await gw.call("POST", FEEDSER, data=raw, headers=signed_headers(raw))
        return status, res

    async def caught_up_and_looked() -> None:
        head = await gw.last_seq()
        await planner.proj.wait_for(head, 10)  # type: ignore[union-attr]
        looked = reactor.passes  # type: ignore[attr-defined]
        await wait_until(lambda: reactor.passes >= looked + 2, what="two planner passes")  # type: ignore[attr-defined]

    try:
        schedule = created("s1", subscriptions=["feedser"])
        await publisher.publish_event(
            new_event("schedule.created", TENANT, schedule, f"{wall_ms()}:0:gw")
        )
        # 1. The first export after a quiet spell: planned at once, not after the window.
        sent = time.monotonic()
        status, res = await post(body("x", [A]))
        assert status == 202 and res["revision"] == 1, res
        first = export_run_id(TENANT, [ref("x")])
        await wait_until(lambda: runs.is_settled(TENANT, first), what="the first export planned")
        assert time.monotonic() - sent < 5, "planned at once"
        # 2. The same body again: a duplicate, nothing recorded.
        seq = await gw.last_seq()
        status, res = await post(body("x", [A]))
        assert status == 200 and res["duplicate"] and res["revision"] == 1, res
        assert await gw.last_seq() == seq
        # 3. x corrected (its first run already planned: a late revision), and y sent twice
        # with another body the second time, all within the window the first run opened.
        status, res = await post(body("x", [A, B]))
        assert status == 202 and res["revision"] == 2, res
        assert [(e["tenant"], e["outcome"], e["revision"]) for e in res["events"]] == [
            (TENANT, "recorded", 2)
        ]
        for keys, n in (([C], 1), ([D], 2)):
            status, res = await post(body("y", keys))
            assert status == 202 and res["revision"] == n, res
        await caught_up_and_looked()
        assert len(await events_of(nc, events, "run.requested")) == 1, "the window is open"
        # 4. The window closes: one run, of x's revision 2 and y's revision 2.
        ahead[0] = 31_000
        second = export_run_id(TENANT, [ref("x"), ref("y")], {ref("x"): 2, ref("y"): 2})
        await wait_until(lambda: runs.is_settled(TENANT, second), what="the window's run")
        await caught_up_and_looked()
        # The API names the revisions the run plans.
        await gw.system.contexts["gateway-test"].wait_for(await gw.last_seq(), 5)
        tok = token(TENANT, "scheduler.read")
        status, view, _ = await gw.call("GET", f"{BASE}/runs/{second}", tok=tok)
        assert status == 200 and view["reason"]["revisions"] == {ref("x"): 2, ref("y"): 2}, view
        status, page, _ = await gw.call("GET", f"{BASE}/runs/{second}/exports", tok=tok)
        assert [(x["exportId"], x["revision"]) for x in page["items"]] == [("x", 2), ("y", 2)]
        status, view, _ = await gw.call("GET", f"{BASE}/runs/{first}", tok=tok)
        assert view["reason"]["revisions"] == {} and view["reason"]["exports"] == [ref("x")]
    finally:
        await planner.stop()
        await stop(gw)
        roles.ROLES.pop("gateway-test", None)

    reqs = await events_of(nc, events, "run.requested")
    assert [r.id for r in reqs] == [first, second], "no run of y's first body"
    reason = reqs[1].payload.reason
    assert reason.feedser_export_ids == [ref("x"), ref("y")]
    assert reason.revisions == {ref("x"): 2, ref("y"): 2}
    plans = {e.payload.run_id: e.payload for e in await events_of(nc, events, "run.planned")}
    segments = await events_of(nc, events, "segment.enqueued")

    def planned_images(run_id: str) -> set[str]:
        return {d for s in segments if s.payload.run_id == run_id for d in s.payload.digests}

    assert planned_images(first) == images_with(A)
    # x: only B (A was covered by the first run); y: its last body, D (never C).
    assert planned_images(second) == images_with(B) | images_with(D)
    assert plans[second].stats.deduped == 20
