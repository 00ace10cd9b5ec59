"""The specification's nightly sequence (§15 B in docs/conformance.md) end to end: a
schedule's cron tick resolves its whole selection, the runner asks the scanner for a report
on every image (with the schedule's ``onlyIf.policyRevision``), and the run's statistics are
stored — gateway, planner, runner and the
reference scanner in one process over the demo catalog, the schedule created through the API.

The schedule ticks every two seconds (cron's optional leading seconds field) so that the test
need not wait for a minute to turn."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from streamproc.bus import jsapi, streams
from streamproc.config import Settings
from streamproc.devsetup import prepare_dev_auth
from streamproc.gateway.tokens_cli import load_key_file, mint_token
from streamproc.natsd.server import EmbeddedNats, free_port
from streamproc.roles import System
from streamproc.scanner.demo import seed_demo
from tests.helpers import env_configuration


async def test_a_cron_tick_becomes_a_run_over_the_whole_selection(
    nats_server: EmbeddedNats, prefix: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STREAMPROC_GATEWAY_CONFIG", "")
    scanner_port = free_port()
    monkeypatch.setenv("STREAMPROC_SCANNER_URL", f"http://127.0.0.1:{scanner_port}")
    settings = Settings(
        configuration=env_configuration(),
        data_dir=tmp_path / "data",
        nats_url=nats_server.url,
        prefix=prefix,
        http_port=free_port(),
    )
    dev = prepare_dev_auth(settings)
    settings = dev.settings
    assert dev.issuer_key is not None
    system = System(settings, ["gateway", "planner", "runner", "scanner"])
    await system.start()
    demo = None
    try:
        monkeypatch.delenv("STREAMPROC_SCANNER_URL")  # the runner has it; seed_demo starts one
        demo = await seed_demo(system, scanner_port=scanner_port, configuration=env_configuration())
        assert demo.scanner is not None and system.nc is not None
        info = await jsapi.stream_info(system.nc, streams.stream_names(prefix)[0])
        assert info is not None
        for projector in system.projectors.values():  # the catalog is indexed everywhere
            await projector.wait_for(info.state.last_seq, 30)
        asked: list[str | None] = []  # the policy revision of each report call
        report = demo.scanner.catalog.report

        def recording(digest: str, policy_revision: str | None, tenant: str | None) -> Any:
            asked.append(policy_revision)
            return report(digest, policy_revision, tenant)

        demo.scanner.catalog.report = recording  # type: ignore[method-assign]

        key, doc = load_key_file(dev.issuer_key)
        admin = mint_token(key, doc, tenant="demo", scope="scheduler.admin")
        auth = {"Authorization": f"Bearer {admin}"}
        api = f"{system.http_url}/api/v1/scheduler"
        schedule = {
            "id": "every-2s", "name": "Every two seconds", "whenCron": "*/2 * * * * *",
            "timezone": "Europe/Sofia", "limits": {"ratePerSecond": 1000},
            "onlyIf": {"policyRevision": "policy-7"},
        }  # fmt: skip
        async with aiohttp.ClientSession(headers=auth) as http:
            async with http.post(f"{api}/schedules?wait=true", json=schedule) as r:
                assert r.status == 201, await r.text()

            async def first_completed() -> dict[str, Any] | None:
                async with http.get(f"{api}/runs?trigger=cron&state=completed") as r:
                    assert r.status == 200, await r.text()
                    runs = (await r.json())["items"]
                return runs[-1] if runs else None

            run = None
            for _ in range(600):
                if (run := await first_completed()) is not None:
                    break
                await asyncio.sleep(0.1)
            assert run is not None, "no cron run completed within 60 s"
            async with http.patch(f"{api}/schedules/every-2s", json={"enabled": False}) as r:
                assert r.status == 202, await r.text()

        assert (run["trigger"], run["scheduleId"], run["state"]) == (
            "cron",
            "every-2s",
            "completed",
        )
        images = len(demo.images)
        stats = run["stats"]
        assert stats["candidates"] == stats["deduped"] == stats["queued"] == images, stats
        assert stats["completed"] == images and stats.get("failed", 0) == 0, stats
        # Every report call carried the schedule's policy revision (§6.3 `policyRevision?`).
        assert len(asked) >= images and set(asked) == {"policy-7"}, asked
    finally:
        if demo is not None:
            await demo.close()
        await system.close()
