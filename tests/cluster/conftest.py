"""Fixtures of the cluster fault tests: a 3-node JetStream cluster on loopback per test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from streamproc.natsd.cluster import NatsCluster


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[NatsCluster]:
    c = NatsCluster(tmp_path / "nats", 3).start()
    try:
        yield c
    finally:
        c.stop()
