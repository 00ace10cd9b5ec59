"""Helpers for integration tests: publishing sample events, folding them in memory,
waiting for a condition."""

from __future__ import annotations

import asyncio
import inspect
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from streamproc.bus import jsapi
from streamproc.bus.fastclient import FastClient
from streamproc.bus.publisher import Publisher
from streamproc.config import Configuration
from streamproc.configfile.loader import activate
from streamproc.events.envelope import Envelope, encode
from streamproc.runtime.projection import Folder, Projection
from streamproc.state.keys import Checkpoint
from streamproc.state.store import MemoryStore


async def publish_samples(pub: Publisher, events: list[Envelope]) -> int:
    acks = await pub.publish_events(events)
    return acks[-1].seq if acks else 0


def env_configuration() -> Configuration:
    """The test's environment (and ``STREAMPROC_CONFIG``'s file, if set), read once as a
    command line reads it at start: for the settings of roles a test starts in-process after
    setting variables."""
    return activate(None)


def memory_fold(
    projections: list[Projection], messages: list[tuple[int, str, bytes]], cp: Checkpoint
) -> MemoryStore:
    """The reference: the same folds over the same messages, in memory, one batch."""
    store = MemoryStore()
    Folder(store, projections).apply(messages, cp)
    return store


def messages_of(
    pub: Publisher, events: list[Envelope], first_seq: int = 1
) -> list[tuple[int, str, bytes]]:
    return [(first_seq + i, pub.subject_of(e), encode(e)) for i, e in enumerate(events)]


async def epoch(nc: FastClient, stream: str) -> str:
    info = await jsapi.stream_info(nc, stream)
    assert info is not None
    return info.created


async def eventually(
    check: Callable[[], Any], timeout: float = 20.0, what: str = "condition", every: float = 0.05
) -> Any:
    """Poll ``check`` (plain or async) until it returns something truthy, and return that."""
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if inspect.isawaitable(got):
            got = await got
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout:g} s (last: {got!r})")
        await asyncio.sleep(every)


def most_in_a_window(times: list[float], w: float) -> int:
    """The most of ``times`` in any window ``[t - w, t]`` (one ending at each time)."""
    ts = sorted(times)
    j = best = 0
    for i, t in enumerate(ts):
        while ts[j] < t - w:
            j += 1
        best = max(best, i - j + 1)
    return best


def mint_token(key_file: Path, scope: str = "scheduler.admin", *, jkt: str | None = None) -> str:
    """A development token for tenant ``demo``, by the documented command, as an operator
    would run it; with ``jkt``, bound to that DPoP key (``--jkt=``: a thumbprint may start
    with ``-``)."""
    cli = Path(sys.executable).with_name("streamproc")
    bind = [f"--jkt={jkt}"] if jkt else []
    out = subprocess.run(
        [str(cli), "token", "issue", "--key", str(key_file), "--tenant", "demo", "--scope", scope,
         *bind],
        check=True,
        capture_output=True,
        text=True,
    )  # fmt: skip
    return out.stdout.strip()
