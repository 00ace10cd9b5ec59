"""Rebuild a role's state from sequence 1 into a fresh directory, then swap it in.

The live directory is only replaced once the new one is complete, and only while no process
holds it; an interrupted replay leaves the old state untouched.

When the event log's retention (max age, max bytes) or a purge has removed its beginning, a
replay cannot rebuild what those events made: it refuses, like a projector with a fresh
state, unless asked for a *partial* rebuild, which starts at the first sequence left and says
so in its summary.
"""

from __future__ import annotations

import contextlib
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tqdm import tqdm

from streamproc import metrics
from streamproc.bus import jsapi
from streamproc.bus.fastclient import FastClient
from streamproc.config import Configuration
from streamproc.names import EVENTS
from streamproc.runtime.deliveries import role_filter
from streamproc.runtime.position import PositionError
from streamproc.runtime.projection import Projection
from streamproc.runtime.projector import SYNC_FAILURES, Projector
from streamproc.state.digest import state_digest
from streamproc.state.settings import sizes_from
from streamproc.state.store import RocksStore, StoreSizes


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
    first_seq: int = 1
    """The first sequence folded; above 1 the state lacks every event before it."""
    rejections: dict[str, dict[str, int]] | None = None
    """Per projection and reason, the rejections the rebuilt state records."""

    @property
    def rate(self) -> float:
        return self.events / self.seconds if self.seconds > 0 else 0.0

    @property
    def partial(self) -> bool:
        return self.first_seq > 1


def partial_warning(stream: str, first_seq: int) -> str:
    """What a partial rebuild lacks, in the words the CLI prints."""
    return (
        f"stream {stream} starts at sequence {first_seq}: events 1..{first_seq - 1} have aged "
        f"out of the log (max age / max bytes) or were purged, so the rebuilt state lacks "
        f"whatever they made (schedules, runs, indexed images, audit entries)"
    )


def _subjects(config: dict[str, Any]) -> str | None:
    """The event log's subject prefix, from its subject filter (``<prefix>.events.>``): the
    live projector checks subjects against the same prefix (``Settings.events_subjects``)."""
    subjects = config.get("subjects") or []
    return subjects[0][:-1] if len(subjects) == 1 and subjects[0].endswith(".>") else None


async def rebuild(
    nc: FastClient,
    stream: str,
    role: str,
    projections_of: Callable[[], list[Projection]],
    target: Path,
    *,
    batch: int = 2000,
    progress: bool = True,
    allow_partial: bool = False,
    configuration: Configuration,
) -> ReplaySummary:
    """Fold the whole stream (up to its head at start) into ``target``, which must be new,
    with the role's projections as ``projections_of`` makes them.

    A stream that no longer starts at sequence 1 is refused (:class:`PositionError`) unless
    ``allow_partial``; then the fold starts at its first sequence and the summary says so.
    ``configuration``: the process's, for the role's projections and the store's bounds."""
    if target.exists():
        shutil.rmtree(target)
    info = await jsapi.stream_info(nc, stream)
    if info is None:
        raise PositionError(f"stream {stream} does not exist; nothing to replay")
    head = info.state.last_seq
    if info.state.first_seq > 1 and not allow_partial:
        raise PositionError(
            f"{partial_warning(stream, info.state.first_seq)}; restore the stream, or pass "
            f"--allow-partial to rebuild from what is left"
        )
    store = RocksStore(target, sizes=configuration.built(sizes_from))
    t0 = time.perf_counter()
    subjects = _subjects(info.config)
    projections = projections_of()
    try:
        proj = Projector(
            nc,
            store,
            projections,
            stream=stream,
            role=role,
            batch=batch,
            durable=False,
            subjects=subjects,
            log_rejections=False,
            rebuild=True,
            # the live projector's filter: the same events, the same quarantined messages
            filter_subjects=(
                role_filter(subjects.removesuffix(f".{EVENTS}."), projections)
                if subjects is not None
                else None
            ),
        )
        await proj.start(ack=False, allow_partial=allow_partial)
        first = proj.applied + 1
        bar = tqdm(
            total=head,
            initial=proj.applied,
            unit="ev",
            unit_scale=True,
            disable=not progress,
            desc=role,
        )
        try:
            while proj.applied < head:
                before = proj.applied
                await proj.step(timeout=2.0)
                if proj.applied < head and proj.lag() == 0:
                    with contextlib.suppress(*SYNC_FAILURES):  # tried again next turn
                        await proj.sync()  # the rest is of kinds the role does not fold
                bar.update(proj.applied - before)
                metrics.REPLAY_PROGRESS.labels(role).set(proj.applied)
        finally:
            bar.close()
            await proj.close()
        proj.folder.finish()  # the digest of what the events make, nothing left deferred
        seconds = time.perf_counter() - t0
        return ReplaySummary(
            role=role,
            events=proj.received,
            last_seq=proj.applied,
            quarantined=proj.folder.quarantined,
            rejected=proj.folder.rejected,
            seconds=seconds,
            digest=state_digest(store),
            path=target,
            first_seq=first,
            rejections=proj.folder.rejections,
        )
    finally:
        store.close()


def swap_in(new: Path, live: Path, sizes: StoreSizes) -> None:
    """Replace ``live`` with ``new``; refuses while another process holds ``live``."""
    if live.exists():
        # takes the directory lock, or raises StateLocked
        holder = RocksStore(live, sizes=sizes)
        holder.close()
        old = live.with_name(f"{live.name}.old-{int(time.time())}")
        live.rename(old)
        new.rename(live)
        shutil.rmtree(old)
    else:
        live.parent.mkdir(parents=True, exist_ok=True)
        new.rename(live)
