"""A role's long-running services (``RoleSpec.background``): started with the role, given
its context, cancelled (and cleaning up) when the process stops; one that fails stops it."""

from __future__ import annotations

import asyncio
from pathlib import Path

from streamproc.app import System
from streamproc.bus.server import EmbeddedNats
from streamproc.config import Settings
from streamproc.projections.activity import Activity
from streamproc.reactor import RoleContext, RoleSpec


async def test_background_services_start_with_the_role_and_stop_with_the_process(
    nats_server: EmbeddedNats, prefix: str, tmp_path: Path
) -> None:
    log: list[str] = []
    running = asyncio.Event()

    async def service(ctx: RoleContext) -> None:
        log.append(f"started for {ctx.role}")
        running.set()
        try:
            await asyncio.Event().wait()
        finally:
            log.append("cleaned up")

    async def failing(ctx: RoleContext) -> None:
        raise RuntimeError("the scanner URL is wrong")

    settings = Settings(data_dir=tmp_path / "data", nats_url=nats_server.url, prefix=prefix)
    spec = RoleSpec([Activity], background=[service])
    system = System(settings, ["activity"], http=False, specs={"activity": spec})
    await system.start()
    try:
        await asyncio.wait_for(running.wait(), 10)
        assert log == ["started for activity"]
    finally:
        await system.close()
    assert log == ["started for activity", "cleaned up"]

    broken = RoleSpec([Activity], background=[failing])
    other = Settings(data_dir=tmp_path / "other", nats_url=nats_server.url, prefix=prefix)
    system = System(other, ["activity"], http=False, specs={"activity": broken})
    await system.start()
    try:
        assert await asyncio.wait_for(system.wait(asyncio.Event()), 10) == 2
    finally:
        await system.close()
