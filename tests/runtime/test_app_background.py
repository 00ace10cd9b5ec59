"""A role's long-running services (``RoleSpec.background``): started with the role, given
its context, cancelled (and cleaning up) when the process stops; one that fails stops it.
Its ``on_open`` hook: called once, in the running loop, with the process's projections."""

from __future__ import annotations

import asyncio
from pathlib import Path

from streamproc.config import Settings
from streamproc.natsd.server import EmbeddedNats
from streamproc.projections.activity import Activity
from streamproc.roles import System
from streamproc.runtime.projection import Projection
from streamproc.runtime.reactor import RoleContext, RoleSpec


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


async def test_on_open_is_called_with_the_open_projections_in_the_running_loop(
    nats_server: EmbeddedNats, prefix: str, tmp_path: Path
) -> None:
    seen: list[tuple[list[str], bool]] = []

    def opened(shared: dict[str, Projection]) -> None:
        seen.append((sorted(shared), asyncio.get_running_loop().is_running()))

    settings = Settings(data_dir=tmp_path / "data", nats_url=nats_server.url, prefix=prefix)
    spec = RoleSpec([Activity], on_open=opened)
    system = System(settings, ["activity"], http=False, specs={"activity": spec})
    await system.start()
    try:
        assert seen == [([Activity.name], True)]
    finally:
        await system.close()
