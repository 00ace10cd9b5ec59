"""Handing glibc's free memory back to the OS: the trim really lowers the RSS left by freed
holes in the heap, it is rate-limited, and the Folder trims after a batch only for a
projection that asks."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from streamproc.config import ConfigError, Configuration
from streamproc.configfile.loader import environ
from streamproc.events.envelope import encode
from streamproc.impact.projection import ImpactProjection
from streamproc.runtime.projection import Folder
from streamproc.state import keys, malloc
from streamproc.state.settings import TRIM_ENV, trim_from
from streamproc.state.store import RocksStore
from tests.impact.helpers import indexed, purl

needs_glibc = pytest.mark.skipif(not malloc.available(), reason="no malloc_trim (not glibc)")


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


@needs_glibc
def test_trim_returns_freed_holes_of_the_heap() -> None:
    # 100 KB blocks (under the mmap threshold: from the heap), each followed by a small
    # live block, so freeing the big ones leaves holes that the heap's top cannot return
    big = [bytearray(b"x" * 100_000) for _ in range(600)]
    pins = []
    for b in big:
        pins.append(bytearray(b"p" * 600))
        b[0] = 1
    big.clear()
    before = rss_bytes()
    assert malloc.trim()
    after = rss_bytes()
    assert before - after > 30 * 1024 * 1024, (before, after)
    assert pins


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_trimmer_is_rate_limited() -> None:
    clock = Clock()
    t = malloc.Trimmer(5.0, clock)
    done = []
    for step in (0.0, 3.0, 2.5, 1.0, 3.0, 1.5):
        clock.t += step
        done.append(t.after_batch())
    assert done == [malloc.available(), False, malloc.available(), False, False, True]
    assert t.trims == (3 if malloc.available() else 0)


@needs_glibc
def test_a_slow_trim_spaces_the_next_ones_out(monkeypatch: pytest.MonkeyPatch) -> None:
    """A trim that took 2 s is followed by none for 2 / TRIM_SHARE = 40 s; a fast one
    brings the interval back."""
    clock = Clock()
    took = [2.0]

    def slow_trim() -> bool:
        clock.t += took[0]
        return True

    monkeypatch.setattr(malloc, "trim", slow_trim)
    t = malloc.Trimmer(5.0, clock)
    assert t.after_batch()
    done = []
    for step in (6.0, 20.0, 13.0, 1.0):  # 39 s after it ended, then 40 s
        clock.t += step
        done.append(t.after_batch())
    assert done == [False, False, False, True]
    took[0] = 0.01
    clock.t += 40.0
    assert t.after_batch()  # the gap was 40 s again after the second slow one
    clock.t += 5.0
    assert t.after_batch()  # fast: every 5 s again
    assert t.trims == 4


def test_trimmer_off_never_trims() -> None:
    t = malloc.Trimmer(0.0, Clock())
    assert not any(t.after_batch() for _ in range(3))
    assert t.trims == 0


def test_interval_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(TRIM_ENV, raising=False)
    assert trim(environ()) == malloc.Trimmer().interval_s == malloc.DEFAULT_TRIM_S
    monkeypatch.setenv(TRIM_ENV, "0")
    assert trim(environ()) == 0.0


def trim(env: dict[str, str]) -> float:
    """The interval as a role's projector gets it: from the typed section, decoded as at
    start."""
    return Configuration(values=env).built(trim_from)


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ("soon", "expected a number, got 'soon'"),
        ("-1", "-1.0 is below the minimum 0"),
        ("nan", "expected a number, got 'nan'"),
    ],
)
def test_a_bad_interval_is_a_config_error_naming_the_variable(raw: str, reason: str) -> None:
    with pytest.raises(ConfigError, match=rf"\(STREAMPROC_MALLOC_TRIM_S\): {re.escape(reason)}"):
        trim({TRIM_ENV: raw})


def fold_two_batches(path: Path) -> Folder:
    """Two batches folded with the configured trim interval (as the projector passes it)."""
    store = RocksStore(path)
    impact = ImpactProjection(max_bytes=None, warm_on_start=False)
    folder = Folder(store, [impact], "impact", trim_interval_s=trim(environ()))
    for b in range(2):
        events = [indexed("t", b * 10 + i, [(*purl(i, 0), True)]) for i in range(10)]
        msgs = [(b * 10 + k + 1, "s", encode(e)) for k, e in enumerate(events)]
        folder.apply(msgs, keys.Checkpoint("S", "e", b * 10 + 10))
    store.close()
    return folder


@needs_glibc
def test_the_folder_trims_after_an_impact_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(TRIM_ENV, "3600")
    folder = fold_two_batches(tmp_path / "a")
    assert folder._trimmer is not None and folder._trimmer.trims == 1  # then rate-limited
    monkeypatch.setenv(TRIM_ENV, "0")
    folder = fold_two_batches(tmp_path / "b")
    assert folder._trimmer is not None and folder._trimmer.trims == 0
