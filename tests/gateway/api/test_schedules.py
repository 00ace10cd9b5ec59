"""Schedules over HTTP: create, read, list, patch with If-Match, pause/resume, delete;
every refusal publishes nothing."""

from __future__ import annotations

import asyncio

import pytest

from streamproc.events import payloads as p
from streamproc.events.envelope import new_event
from tests.cluster.system import read_events
from tests.gateway.harness import BASE, Harness, token

S = f"{BASE}/schedules"
NEW = {"name": "nightly", "whenCron": "0 2 * * *", "timezone": "Europe/Sofia"}


async def create(gw: Harness, body: dict | None = None, tenant: str = "acme") -> dict:
    status, view, headers = await gw.call(
        "POST", f"{S}?wait=true", tok=token(tenant), json=body or NEW
    )
    assert status == 201, view
    assert headers["Location"] == f"{S}/{view['id']}"
    assert headers["ETag"] == f'"{view["version"]}"'
    return view


async def test_create_answers_202_with_event_id_and_sequence(gw: Harness) -> None:
    before = await gw.last_seq()
    status, body, headers = await gw.call("POST", S, tok=token(), json=NEW)
    assert status == 202
    assert body["seq"] == before + 1 and body["eventId"] and body["applied"] is False
    assert headers["Location"] == f"{S}/{body['id']}"
    assert headers["X-Request-Id"]


async def test_a_wait_that_is_neither_true_nor_false_is_400_and_publishes_nothing(
    gw: Harness,
) -> None:
    before = await gw.last_seq()
    status, problem, _ = await gw.call("POST", f"{S}?wait=maybe", tok=token(), json=NEW)
    assert status == 400 and problem["field"] == "query.wait", problem
    assert "wait must be true or false" in problem["detail"]
    assert await gw.last_seq() == before
    status, view, _ = await gw.call("POST", f"{S}?wait=on", tok=token(), json=NEW)
    assert status == 201 and view["name"] == "nightly", view


async def test_create_with_wait_reads_back_next_fire_times_in_its_zone(gw: Harness) -> None:
    view = await create(gw, {**NEW, "id": "nightly-1", "selection": {"namespaces": ["prod"]}})
    assert view["id"] == "nightly-1" and view["tenantId"] == "acme"
    assert view["selection"]["namespaces"] == ["prod"]
    assert len(view["nextFireTimes"]) == 5
    assert all(
        t[11:19] == "02:00:00" and t[19:] in ("+02:00", "+03:00") for t in view["nextFireTimes"]
    )
    status, got, headers = await gw.call("GET", f"{S}/nightly-1?next=2", tok=token())
    assert status == 200 and len(got["nextFireTimes"]) == 2
    assert headers["ETag"] == f'"{view["version"]}"'


async def test_create_refusals_publish_nothing(gw: Harness) -> None:
    await create(gw, {**NEW, "id": "taken"})
    seq = await gw.last_seq()
    cases = [
        ({**NEW, "id": "taken"}, 409, None),
        ({**NEW, "whenCron": "99 * * * *"}, 400, "$.whenCron"),
        ({**NEW, "timezone": "Mars/Olympus"}, 400, "$.timezone"),
        ({**NEW, "surprise": 1}, 400, "$.surprise"),
        ({**NEW, "selection": {"scope": "everything"}}, 400, "$.selection.scope"),
        ({**NEW, "id": "has spaces"}, 400, "$.id"),
        ({"whenCron": "* * * * *", "timezone": "UTC"}, 400, "$.name"),
        ({**NEW, "name": 7}, 400, "$.name"),
    ]
    for body, status, field in cases:
        got, problem, headers = await gw.call("POST", S, tok=token(), json=body)
        assert got == status, (body, problem)
        assert headers["Content-Type"].startswith("application/problem+json")
        if field:
            assert problem["field"] == field, problem
    got, problem, _ = await gw.call(
        "POST", S, tok=token(), data=b'{"name": ', headers={"Content-Type": "application/json"}
    )
    assert got == 400 and problem["type"].endswith("malformed-json")
    got, problem, _ = await gw.call(
        "POST",
        S,
        tok=token(),
        data=b"name=x",
        headers={"Content-Type": "application/x-www-form-urlencoded"},
    )
    assert got == 415
    assert await gw.last_seq() == seq


async def test_list_pages_filters_and_cursor_errors(gw: Harness) -> None:
    for i in range(5):
        await create(gw, {**NEW, "id": f"s{i}", "enabled": i % 2 == 0})
    seen, cursor = [], None
    while True:
        q = f"{S}?limit=2" + (f"&cursor={cursor}" if cursor else "")
        status, page, _ = await gw.call("GET", q, tok=token(scopes="scheduler.read"))
        assert status == 200
        seen += [s["id"] for s in page["items"]]
        cursor = page["nextCursor"]
        if not cursor:
            break
    assert seen == ["s0", "s1", "s2", "s3", "s4"]
    _, paused, _ = await gw.call("GET", f"{S}?paused=true", tok=token())
    assert [s["id"] for s in paused["items"]] == ["s1", "s3"]
    assert all(s["nextFireTimes"] == [] for s in paused["items"])
    for bad in ("limit=0", "limit=501", "limit=x", "cursor=%21%21", "paused=maybe", "next=99"):
        status, problem, _ = await gw.call("GET", f"{S}?{bad}", tok=token())
        assert status == 400, bad
        assert problem["field"].startswith("query."), problem


async def test_patch_update_pause_resume_with_if_match(gw: Harness) -> None:
    v = await create(gw, {**NEW, "id": "p1"})
    url = f"{S}/p1?wait=true"
    status, v2, h = await gw.call(
        "PATCH",
        url,
        tok=token(),
        json={"whenCron": "*/15 * * * *"},
        headers={"If-Match": f'"{v["version"]}"'},
    )
    assert status == 200, v2
    assert v2["whenCron"] == "*/15 * * * *" and v2["version"] > v["version"]
    assert h["ETag"] == f'"{v2["version"]}"'
    seq = await gw.last_seq()
    # Stale version: 412 from the read model, nothing published.
    status, problem, _ = await gw.call(
        "PATCH", url, tok=token(), json={"name": "x"}, headers={"If-Match": f'"{v["version"]}"'}
    )
    assert status == 412 and problem["currentVersion"] == v2["version"]
    for body, why in [
        ({"paused": True, "name": "x"}, "of its own"),
        ({"enabled": False, "name": "x"}, "of its own"),
        ({"enabled": False, "paused": False}, "contradict"),
        ({}, "changes nothing"),
        ({"reason": "r"}, "reason"),
        ({"whenCron": "bogus"}, "cron"),
    ]:
        status, problem, _ = await gw.call("PATCH", url, tok=token(), json=body)
        assert status == 400 and why in problem["detail"], problem
    for header, status_wanted in [('W/"1"', 412), ("abc", 400)]:
        status, _, _ = await gw.call(
            "PATCH", url, tok=token(), json={"name": "x"}, headers={"If-Match": header}
        )
        assert status == status_wanted
    assert await gw.last_seq() == seq
    status, v3, _ = await gw.call(
        "PATCH", url, tok=token(), json={"paused": True, "reason": "ops"}, headers={"If-Match": "*"}
    )
    assert status == 200 and v3["paused"] and not v3["enabled"] and v3["nextFireTimes"] == []
    seq = await gw.last_seq()
    status, again, _ = await gw.call("PATCH", url, tok=token(), json={"paused": True})
    assert status == 200 and again["version"] == v3["version"], "already paused: a no-op"
    assert await gw.last_seq() == seq
    status, v4, _ = await gw.call("PATCH", url, tok=token(), json={"paused": False})
    assert status == 200 and not v4["paused"]


async def test_patch_and_delete_of_unknown_or_deleted_are_404(gw: Harness) -> None:
    await create(gw, {**NEW, "id": "gone"})
    status, body, _ = await gw.call("DELETE", f"{S}/gone?wait=true", tok=token())
    assert status == 200 and body["deleted"] is True
    seq = await gw.last_seq()
    for method, path, body in [
        ("PATCH", f"{S}/gone", {"name": "x"}),
        ("PATCH", f"{S}/never", {"name": "x"}),
        ("DELETE", f"{S}/gone", None),
        ("DELETE", f"{S}/never", None),
        ("GET", f"{S}/gone", None),
    ]:
        status, problem, _ = await gw.call(method, path, tok=token(), json=body)
        assert status == 404, (method, path, problem)
    assert await gw.last_seq() == seq
    _, listing, _ = await gw.call("GET", f"{S}?includeDeleted=true", tok=token())
    assert [s["id"] for s in listing["items"]] == ["gone"]


async def test_concurrent_edit_loses_with_412_from_jetstream(gw: Harness) -> None:
    v = await create(gw, {**NEW, "id": "race"})
    # Freeze the read model, then let another writer change the schedule behind its back.
    proj = next(iter(gw.system.projectors.values()))
    proj.stop()
    task = next(t for t in gw.system.tasks if t.get_name().startswith("projector"))
    await asyncio.wait_for(task, 10)
    assert gw.system.publisher is not None and gw.system.clock is not None
    other = new_event(
        "schedule.updated",
        "acme",
        p.ScheduleUpdated(schedule_id="race", name="theirs"),
        gw.system.clock.now(),
    )
    await gw.system.publisher.publish_event(other, expected_last_subject_seq=v["version"])
    seq = await gw.last_seq()
    status, problem, _ = await gw.call(
        "PATCH",
        f"{S}/race",
        tok=token(),
        json={"name": "mine"},
        headers={"If-Match": f'"{v["version"]}"'},
    )
    assert status == 412, problem
    status, problem, _ = await gw.call("PATCH", f"{S}/race", tok=token(), json={"name": "mine"})
    assert status == 409, problem
    assert await gw.last_seq() == seq


async def test_delete_with_stale_version_is_412(gw: Harness) -> None:
    v = await create(gw, {**NEW, "id": "d1"})
    await gw.call("PATCH", f"{S}/d1?wait=true", tok=token(), json={"name": "renamed"})
    seq = await gw.last_seq()
    status, _, _ = await gw.call(
        "DELETE", f"{S}/d1", tok=token(), headers={"If-Match": str(v["version"])}
    )
    assert status == 412
    assert await gw.last_seq() == seq


async def test_enabled_pauses_and_resumes_as_the_specification_has_it(gw: Harness) -> None:
    await create(gw, {**NEW, "id": "sw"})
    url = f"{S}/sw?wait=true"
    status, off, _ = await gw.call("PATCH", url, tok=token(), json={"enabled": False})
    assert status == 200 and (off["enabled"], off["paused"], off["nextFireTimes"]) == (
        False,
        True,
        [],
    )
    _, listed, _ = await gw.call("GET", f"{S}?enabled=false", tok=token())
    assert [s["id"] for s in listed["items"]] == ["sw"]
    _, listed, _ = await gw.call("GET", f"{S}?enabled=true", tok=token())
    assert listed["items"] == []
    # the state it is already in goes with edits: a client sending its document back
    status, edited, _ = await gw.call(
        "PATCH", url, tok=token(), json={"enabled": False, "name": "renamed"}
    )
    assert status == 200 and edited["name"] == "renamed" and edited["paused"], edited
    status, on, _ = await gw.call("PATCH", url, tok=token(), json={"enabled": True})
    assert status == 200 and on["enabled"] and not on["paused"] and on["nextFireTimes"]
    assert gw.system.nc is not None
    log = await read_events(gw.system.nc, gw.system.settings.events_stream)
    events = [e.kind for _, e in log if e.kind.startswith("schedule.")]
    assert events[-3:] == ["schedule.paused", "schedule.updated", "schedule.resumed"]


@pytest.mark.parametrize(
    ("body", "field", "named"),
    [
        ({**NEW, "cron": "0 2 * * *"}, "$.cron", "`whenCron`"),
        ({**{k: v for k, v in NEW.items() if k != "whenCron"}, "cron": "0 2 * * *"}, "$.cron",
         "`whenCron`"),
        ({**NEW, "notify": {"includeKev": True}}, "$.notify.includeKev", "`includeKEV`"),
    ],
)  # fmt: skip
async def test_names_earlier_versions_took_are_400_naming_the_specifications(
    gw: Harness, body: dict[str, object], field: str, named: str
) -> None:
    seq = await gw.last_seq()
    status, problem, _ = await gw.call("POST", S, tok=token(), json=body)
    assert status == 400 and problem["field"] == field, problem
    assert named in problem["detail"], problem
    await create(gw, {**NEW, "id": "old-names"})
    patch = {k: v for k, v in body.items() if k in ("cron", "notify")}
    status, problem, _ = await gw.call("PATCH", f"{S}/old-names", tok=token(), json=patch)
    assert status == 400 and named in problem["detail"], problem
    assert await gw.last_seq() == seq + 1, "only the good schedule was recorded"


async def test_spec_fields_tenant_id_and_include_kev_round_trip(gw: Harness) -> None:
    view = await create(
        gw,
        {**NEW, "id": "spec", "tenantId": "acme", "notify": {"includeKEV": False,
         "minSeverity": "critical", "onNewFindings": True}},
    )  # fmt: skip
    assert view["tenantId"] == "acme" and view["whenCron"] == NEW["whenCron"]
    assert view["notify"] == {"onNewFindings": True, "minSeverity": "critical", "includeKEV": False}
    for key in ("createdAt", "updatedAt", "createdBy", "updatedBy", "enabled", "onlyIf"):
        assert key in view, key
    status, problem, _ = await gw.call("POST", S, tok=token(), json={**NEW, "tenantId": "globex"})
    assert status == 400 and problem["field"] == "$.tenantId", problem


async def test_max_jobs_over_the_ceiling_is_refused(gw: Harness) -> None:
    ceiling = gw.gateway.max_jobs_per_run
    assert ceiling == 50_000, "planner.max_jobs_per_run's default"
    seq = await gw.last_seq()
    status, problem, _ = await gw.call(
        "POST", S, tok=token(), json={**NEW, "limits": {"maxJobs": ceiling + 1}}
    )
    assert status == 400 and problem["field"] == "$.limits.maxJobs", problem
    assert problem["limit"] == ceiling and "planner.max_jobs_per_run" in problem["detail"]
    await create(gw, {**NEW, "id": "capped", "limits": {"maxJobs": ceiling}})
    status, problem, _ = await gw.call(
        "PATCH", f"{S}/capped", tok=token(), json={"limits": {"maxJobs": ceiling + 1}}
    )
    assert status == 400 and problem["field"] == "$.limits.maxJobs", problem
    assert await gw.last_seq() == seq + 1
