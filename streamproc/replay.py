"""Rebuild a role's state from sequence 1 into a fresh directory, then swap it in.

The live directory is only replaced once the new one is complete, and only while no process
holds it; an interrupted replay leaves the old state untouched.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from streamproc import metrics
from streamproc.bus import jsapi
from streamproc.bus.fastclient import FastClient
from streamproc.projector import PositionError, Projector
from streamproc.roles import projections_for
from streamproc.state.digest import state_digest
from streamproc.state.store import RocksStore


@dataclass
class ReplaySummary:
    role: str
    events: int
    last_seq: int
    quarantined: int
    rejected: int
    seconds: float
    digest: str
    path: Path

    @property
    def rate(self) -> float:
        return self.events / self.seconds if self.seconds > 0 else 0.0


async def rebuild(
    nc: FastClient,
    stream: str,
    role: str,
    target: Path,
    *,
    batch: int = 2000,
    progress: bool = True,
) -> ReplaySummary:
    """Fold the whole stream (up to its head at start) into ``target``, which must be new."""
    if target.exists():
        shutil.rmtree(target)
    info = await jsapi.stream_info(nc, stream)
    if info is None:
        raise PositionError(f"stream {stream} does not exist; nothing to replay")
    head = info.state.last_seq
    store = RocksStore(target)
    t0 = time.perf_counter()
    try:
        proj = Projector(
            nc, store, projections_for(role), stream=stream, role=role, batch=batch, durable=False
        )
        await proj.start(ack=False)
        bar = tqdm(total=head, unit="ev", unit_scale=True, disable=not progress, desc=role)
        try:
            while proj.applied < head:
                before = proj.applied
                await proj.step(timeout=2.0)
                bar.update(proj.applied - before)
                metrics.REPLAY_PROGRESS.labels(role).set(proj.applied)
        finally:
            bar.close()
            await proj.close()
        seconds = time.perf_counter() - t0
        return ReplaySummary(
            role=role,
            events=proj.applied,
            last_seq=proj.applied,
            quarantined=proj.folder.quarantined,
            rejected=proj.folder.rejected,
            seconds=seconds,
            digest=state_digest(store),
            path=target,
        )
    finally:
        store.close()


def swap_in(new: Path, live: Path) -> None:
    """Replace ``live`` with ``new``; refuses while another process holds ``live``."""
    if live.exists():
        holder = RocksStore(live)  # takes the directory lock, or raises StateLocked
        holder.close()
        old = live.with_name(f"{live.name}.old-{int(time.time())}")
        live.rename(old)
        new.rename(live)
        shutil.rmtree(old)
    else:
        live.parent.mkdir(parents=True, exist_ok=True)
        new.rename(live)
