"""The production layout on the 3-node cluster (R3 streams and buckets): every role its own
process, two gateways, the reference scanner; ``make run``'s flow with replays across
gateways and SIGKILLed planner and runner (tests/topology.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from streamproc.natsd.cluster import NatsCluster
from tests.topology import make_run_flow, split_layout

pytestmark = pytest.mark.cluster


async def test_make_run_flow_with_every_role_its_own_process(
    cluster: NatsCluster, prefix: str, tmp_path: Path
) -> None:
    async with split_layout(tmp_path, cluster.url, prefix) as layout:
        figures = await make_run_flow(layout)
    print(f"\nsplit layout, 3-node cluster: {figures}")
