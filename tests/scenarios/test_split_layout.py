"""The production layout on one NATS server: every role its own process, two gateways, the
reference scanner; ``make run``'s flow with replays across gateways and SIGKILLed planner
and runner (tests/topology.py)."""

from __future__ import annotations

from pathlib import Path

from streamproc.natsd.server import EmbeddedNats
from tests.topology import make_run_flow, split_layout


async def test_make_run_flow_with_every_role_its_own_process(
    nats_server: EmbeddedNats, prefix: str, tmp_path: Path
) -> None:
    async with split_layout(tmp_path, nats_server.url, prefix) as layout:
        figures = await make_run_flow(layout)
    print(f"\nsplit layout, one NATS server: {figures}")
