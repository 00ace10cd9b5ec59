"""A client written from the specification alone (§3 and §5: its paths, its field names, its
states), against the real system over loopback — gateway, planner, runner and the reference
scanner on a real nats-server: it creates, reads, patches (pausing with ``enabled: false``)
and deletes schedules, starts and cancels runs, reads runs and impact cursors, and no answer
is a 4xx. Every state any run reports on the way is one of the specification's six."""

from __future__ import annotations

import asyncio
import json
import shutil
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from streamproc.config import Settings
from streamproc.devsetup import prepare_dev_auth
from streamproc.natsd.server import EmbeddedNats, free_port
from streamproc.roles import System
from streamproc.scanner.demo import DATA, Demo, seed_demo
from streamproc.scanner.feedser import WEBHOOK_PATH, signed_headers
from tests.flows import NEW_ADVISORIES
from tests.helpers import env_configuration, mint_token

SIX = {"planning", "queued", "running", "completed", "error", "cancelled"}
FINAL = {"completed", "error", "cancelled"}
SCHEDULE_FIELDS = {
    "tenantId", "name", "enabled", "whenCron", "timezone", "mode", "selection", "onlyIf",
    "notify", "limits", "createdAt", "updatedAt", "createdBy", "updatedBy",
}  # fmt: skip
RUN_FIELDS = {
    "scheduleId", "tenantId", "trigger", "reason", "state", "stats", "startedAt", "finishedAt",
    "error",
}  # fmt: skip
STATS = {"candidates", "deduped", "queued", "completed", "deltas", "newCriticals"}


@dataclass
class Client:
    """Plain HTTP with the document's names; remembers every answer and every run state."""

    http: aiohttp.ClientSession
    api: str
    token: str
    answers: list[tuple[str, str, int]] = field(default_factory=list)
    states: set[str] = field(default_factory=set)

    async def call(self, method: str, path: str, body: Any = None) -> Any:
        headers = {"Authorization": f"Bearer {self.token}"}
        async with self.http.request(method, self.api + path, json=body, headers=headers) as r:
            self.answers.append((method, path, r.status))
            doc = await r.json(content_type=None)
            assert r.status < 400, (method, path, r.status, doc)
        where = path.split("?")[0].split("/")[1:]
        if where == ["runs"]:
            self.states.update(run["state"] for run in doc["items"])
        elif where[0] in ("run", "runs") and len(where) <= 3 and "state" in doc:
            self.states.add(doc["state"])  # a run, or a run's answer to a request or cancel
        return doc

    async def run_until(self, run_id: str, states: set[str], timeout: float = 60.0) -> Any:
        for _ in range(int(timeout / 0.1)):
            run = await self.call("GET", f"/runs/{run_id}")
            if run["state"] in states:
                return run
            await asyncio.sleep(0.1)
        raise AssertionError(f"run {run_id} never reached {states}: last {run['state']}")


@asynccontextmanager
async def system(
    nats_server: EmbeddedNats, prefix: str, tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[System, Demo]]:
    monkeypatch.setenv("STREAMPROC_GATEWAY_CONFIG", "")
    monkeypatch.setenv("STREAMPROC_PLANNER_DEBOUNCE_S", "0")
    scanner_port = free_port()
    monkeypatch.setenv("STREAMPROC_SCANNER_URL", f"http://127.0.0.1:{scanner_port}")
    settings = Settings(
        configuration=env_configuration(),
        data_dir=tmp / "data",
        nats_url=nats_server.url,
        prefix=prefix,
        http_port=free_port(),
    )
    settings = prepare_dev_auth(settings).settings
    sys_ = System(settings, ["gateway", "planner", "runner", "scanner"])
    await sys_.start()
    demo = None
    try:
        monkeypatch.delenv("STREAMPROC_SCANNER_URL")
        demo = await seed_demo(sys_, scanner_port=scanner_port, configuration=env_configuration())
        yield sys_, demo
    finally:
        if demo is not None:
            await demo.close()
        await sys_.close()


async def test_a_client_of_the_specification_alone_gets_no_4xx(
    nats_server: EmbeddedNats, prefix: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with (
        system(nats_server, prefix, tmp_path, monkeypatch) as (sys_, demo),
        aiohttp.ClientSession() as http,
    ):
        key = sys_.settings.data_dir / "dev" / "issuer.jwk"
        c = Client(
            http, f"{sys_.http_url}/api/v1/scheduler", await asyncio.to_thread(mint_token, key)
        )

        # §5.1: create, read, list, patch (update, pause, resume), as §3 names the document
        doc = {
            "tenantId": "demo", "name": "Nightly prod", "enabled": True,
            "whenCron": "0 2 * * *", "timezone": "Europe/Sofia", "mode": "analysis-only",
            "selection": {"scope": "all-images"},
            "onlyIf": {"lastReportOlderThanDays": 0},
            "notify": {"onNewFindings": True, "minSeverity": "high", "includeKEV": True},
            "limits": {"maxJobs": 1000, "ratePerSecond": 50, "parallelism": 2},
        }  # fmt: skip
        created = await c.call("POST", "/schedules", doc)
        sid = created["id"]
        for _ in range(100):
            listed = await c.call("GET", "/schedules")
            if any(s["id"] == sid for s in listed["items"]):
                break
            await asyncio.sleep(0.05)
        got = await c.call("GET", f"/schedules/{sid}")
        assert got.keys() >= SCHEDULE_FIELDS, SCHEDULE_FIELDS - got.keys()
        for k, v in doc.items():  # what it sent, with the defaults of what it left out
            assert got[k] == v or {**got[k], **v} == got[k], (k, got[k], v)
        assert got["nextFireTimes"], "details + next run"
        await c.call("PATCH", f"/schedules/{sid}", {"whenCron": "30 1 * * *"})

        async def now(k: str, v: object) -> dict[str, Any]:
            for _ in range(100):
                s = await c.call("GET", f"/schedules/{sid}")
                if s[k] == v:
                    return s  # type: ignore[no-any-return]
                await asyncio.sleep(0.05)
            raise AssertionError((k, v))

        await now("whenCron", "30 1 * * *")
        await c.call("PATCH", f"/schedules/{sid}", {"enabled": False})
        paused = await now("enabled", False)
        assert paused["nextFireTimes"] == []
        await c.call("PATCH", f"/schedules/{sid}", {"enabled": True})
        await now("enabled", True)

        # §5.2: an ad-hoc run, read until it finishes
        run = await c.call("POST", "/run", {"mode": "analysis-only",
                                            "selection": {"scope": "all-images"},
                                            "reason": "manual"})  # fmt: skip
        done = await c.run_until(run["id"], FINAL)
        assert done.keys() >= RUN_FIELDS and done["stats"].keys() >= STATS
        assert done["state"] == "completed" and done["trigger"] == "manual"
        assert done["tenantId"] == "demo" and done["startedAt"] and done["finishedAt"]
        assert done["stats"]["completed"] == len(demo.images)
        # ... and one cancelled (best effort: it may finish first)
        other = await c.call("POST", "/run", {"mode": "analysis-only", "reason": "manual"})
        await c.run_until(other["id"], {"planning", "queued", "running", *FINAL})
        await c.call("POST", f"/runs/{other['id']}/cancel")
        await c.run_until(other["id"], FINAL)

        # an export-driven run: reason and the impact cursors
        for name in NEW_ADVISORIES:
            shutil.copy(DATA / "osv" / name, demo.osv_dir / name)
        async with http.post(f"{demo.scanner_url}/advisories/reload"):
            pass
        secret = (sys_.settings.data_dir / "dev" / "feedser.secret").read_text().strip()
        body = json.dumps(
            {"exportId": "2026-01-05.1", "changedProductKeys": ["pkg:pypi/setuptools"]}
        ).encode()
        async with http.post(
            sys_.http_url + WEBHOOK_PATH,
            data=body,
            # §5.4: signed, plus the Authority token (the client's own: scheduler.admin)
            headers={
                **signed_headers(body, str(uuid.uuid4()), secret=secret),
                "Authorization": f"Bearer {c.token}",
            },
        ) as r:
            assert r.status == 202, await r.text()
        for _ in range(600):
            runs = (await c.call("GET", "/runs?trigger=feedser"))["items"]
            if runs and runs[0]["state"] in FINAL:
                break
            await asyncio.sleep(0.1)
        feed = runs[0]
        assert feed["reason"]["feedserExportId"] == "2026-01-05.1"
        assert feed["reason"]["cursor"] == "2026-01-05.1" and feed["reason"]["exportCount"] == 1
        exports = await c.call("GET", f"/runs/{feed['id']}/exports")
        assert [x["exportId"] for x in exports["items"]] == ["2026-01-05.1"]
        cursors = await c.call("GET", "/impact-cursors")
        assert cursors["tenantId"] == "demo" and cursors["feedserLastExportId"] == "2026-01-05.1"
        assert cursors["vexerLastExportId"] is None and cursors["updatedAt"]

        # every run, as listed
        listed = await c.call("GET", "/runs")
        assert len(listed["items"]) == 3
        await c.call("DELETE", f"/schedules/{sid}")

        assert all(status < 400 for _, _, status in c.answers), c.answers
        assert c.states <= SIX, c.states
        assert {"completed", "cancelled"} & c.states and c.states & {"planning", "queued"}
