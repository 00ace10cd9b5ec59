"""Each projection chooses its families' read options: a family it declares ``BULK`` is read
past the block cache, so a sweep or a start that reads it whole does not evict the blocks
the point reads of the other families keep hot. Real RocksDB, a block cache of its own."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import ClassVar

import pytest

from streamproc.planner.exports import PlannerExports
from streamproc.planner.projection import LastReports, PlannerRuns, PlannerSchedules
from streamproc.readmodel.runs import Runs
from streamproc.runtime.projection import Folder, Projection
from streamproc.state.store import BULK, POINT, Reads, RocksStore, StoreSizes
from streamproc.state.tx import Tx

N = 20_000
"""Keys per family: ~4 MB of values each, far more than the flushed store's index blocks."""


class Swept(Projection):
    """A family point-read by its folds and one only swept (a retention index)."""

    name: ClassVar[str] = "swept"
    kinds: ClassVar[frozenset[str]] = frozenset({"schedule.paused"})
    families: ClassVar[tuple[str, ...]] = ("swept_hot", "swept_index")
    family_reads: ClassVar[Mapping[str, Reads]] = {"swept_index": BULK}

    def fold(self, tx: Tx, event: object) -> None:  # pragma: no cover - never folds here
        raise AssertionError


class Foreign(Swept):
    name: ClassVar[str] = "foreign"
    families: ClassVar[tuple[str, ...]] = ("foreign_only",)
    family_reads: ClassVar[Mapping[str, Reads]] = {"swept_index": BULK}


@pytest.fixture
def rocks(tmp_path: Path) -> Iterator[RocksStore]:
    # a cache size no other test uses: the process shares one cache per size
    s = RocksStore(tmp_path / "s", sizes=StoreSizes(8 << 20, (29 << 20) + 4096))
    yield s
    s.close()


def _fill(s: RocksStore, families: tuple[str, ...]) -> None:
    s.ensure_families(families)
    value = os.urandom(200)
    for cf in families:
        s.commit({cf: {i.to_bytes(4, "big"): value for i in range(N)}})
        s._cfs[cf].flush(True)  # into table files: reads now go through the block cache


def _cached_by(s: RocksStore, read: Iterator[object]) -> int:
    before = s.block_cache.get_usage()
    for _ in read:
        pass
    return int(s.block_cache.get_usage() - before)


def test_a_bulk_family_is_scanned_and_read_past_the_cache(rocks: RocksStore) -> None:
    _fill(rocks, ("hot", "index"))
    rocks.set_reads({"index": BULK})
    assert _cached_by(rocks, rocks.scan("index")) == 0
    keys = [i.to_bytes(4, "big") for i in range(0, N, 5)]
    assert _cached_by(rocks, iter(rocks.get_many("index", keys))) == 0
    assert _cached_by(rocks, (rocks.get("index", k) for k in keys)) == 0
    assert _cached_by(rocks, rocks.scan("hot")) > 2 << 20, "a point family's blocks are kept"
    rocks.set_reads({"index": POINT})
    assert _cached_by(rocks, rocks.scan("index")) > 2 << 20, "back to the cache"


def test_the_runtime_applies_what_each_projection_declares(rocks: RocksStore) -> None:
    Folder(rocks, [Swept()], role="test")
    _fill(rocks, Swept.families)
    assert _cached_by(rocks, rocks.scan("swept_index")) == 0
    assert _cached_by(rocks, rocks.scan("swept_hot")) > 2 << 20


def test_a_projection_chooses_only_for_its_own_families(rocks: RocksStore) -> None:
    with pytest.raises(ValueError, match="does not own"):
        Folder(rocks, [Foreign()], role="test")


def test_the_families_read_only_in_bulk_are_declared() -> None:
    """What each projection's reads do: loaded whole at open (then kept in memory) or only
    swept; the families read by key stay cached."""
    declared = {
        cf
        for p in (PlannerSchedules, PlannerRuns, LastReports, PlannerExports, Runs)
        for cf, reads in p.family_reads.items()
        if reads == BULK
    }
    assert declared == {"pl_schedules", "pl_backlog", "pl_reports", "pl_cursors", "rm_runs_expiry"}
