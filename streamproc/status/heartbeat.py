"""The writer side: a task of every running :class:`streamproc.runtime.app.System` that puts one
record per role into the status bucket every interval."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Protocol

from nats.js.kv import KeyValue

from streamproc import metrics
from streamproc.bus import jsapi
from streamproc.bus.fastclient import FastClient
from streamproc.cancellation import checkpoint
from streamproc.config import Settings
from streamproc.status.record import Heartbeat, encode, interval_from, open_bucket

log = logging.getLogger(__name__)


class Observed(Protocol):
    """What the heartbeat reads of a running :class:`streamproc.runtime.app.System`."""

    # Read-only members, so a System's concrete dict and list types satisfy them.
    @property
    def settings(self) -> Settings: ...
    @property
    def projectors(self) -> Mapping[str, Any]: ...
    @property
    def tasks(self) -> Sequence[asyncio.Task[None]]: ...
    @property
    def http_url(self) -> str: ...
    @property
    def nc(self) -> FastClient | None: ...


def _lease(system: Observed, role: str) -> str | None:
    leader = getattr(system, "leaders", {}).get(role)
    return None if leader is None else str(leader.state)


def _problems(system: Observed, role: str) -> list[str]:
    ctx = getattr(system, "contexts", {}).get(role)
    return [f"{k}: {v}"[:500] for k, v in sorted(ctx.problems.items())] if ctx else []


def _notes(system: Observed, role: str) -> list[str]:
    ctx = getattr(system, "contexts", {}).get(role)
    return [v[:500] for _, v in sorted(ctx.notes.items())] if ctx else []


def _failure(system: Observed, role: str) -> str | None:
    proj = system.projectors[role]
    if proj.failure is not None:
        return f"{type(proj.failure).__name__}: {proj.failure}"[:500]
    for t in system.tasks:
        if t.get_name().endswith(f"-{role}") and t.done() and not t.cancelled():
            exc = t.exception()
            if exc is not None:
                return f"{t.get_name()}: {type(exc).__name__}: {exc}"[:500]
    return None


class StatusHeartbeat:
    """Puts one record per role of a running system into the status bucket, periodically."""

    def __init__(
        self,
        system: Observed,
        *,
        lag_limit: int,
        interval: float | None = None,
    ) -> None:
        self.system = system
        self.interval = (
            system.settings.configuration.built(interval_from) if interval is None else interval
        )
        self.lag_limit = lag_limit
        self.started = datetime.now(UTC).isoformat(timespec="seconds")
        self.pid = os.getpid()
        self.kv: KeyValue | None = None
        self._task: asyncio.Task[None] | None = None
        self._failing = False
        self.beats = 0

    async def start(self) -> StatusHeartbeat:
        """Beat once now (so ``status`` sees the instance at once), then periodically."""
        await self._beat_logged()
        self._task = asyncio.create_task(self._loop(), name="status-heartbeat")
        return self

    def records(self, head: int) -> list[Heartbeat]:
        s = self.system.settings
        out = []
        now = time.time_ns() // 1_000_000
        for role, proj in self.system.projectors.items():
            proj.head = max(proj.head, head)
            metrics.CONSUMER_LAG.labels(role).set(proj.lag())
            out.append(
                Heartbeat(
                    role=role,
                    node=s.node_id,
                    pid=self.pid,
                    http_url=self.system.http_url,
                    stream=s.events_stream,
                    applied=proj.applied,
                    head=proj.head,
                    lag=proj.lag(),
                    lag_limit=self.lag_limit,
                    failure=_failure(self.system, role),
                    lease=_lease(self.system, role),
                    problems=_problems(self.system, role),
                    notes=_notes(self.system, role),
                    rejections=proj.folder.rejections,
                    started=self.started,
                    updated_ms=now,
                    interval_s=self.interval,
                )
            )
        return out

    async def beat(self) -> None:
        nc = self.system.nc
        if nc is None:
            return
        if self.kv is None:
            self.kv = await open_bucket(nc, self.system.settings, self.interval)
        info = await jsapi.stream_info(nc, self.system.settings.events_stream)
        head = info.state.last_seq if info is not None else 0
        for proj in self.system.projectors.values():
            await proj.ask_lag()
        for rec in self.records(head):
            await self.kv.put(rec.key, encode(rec))
        self.beats += 1

    async def _beat_logged(self) -> None:
        try:
            async with asyncio.timeout(max(5.0, self.interval)):
                await self.beat()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if not self._failing:  # once per outage, not once per beat
                log.warning("status heartbeat not written: %s", exc)
            self._failing = True
        else:
            if self._failing:
                log.info("status heartbeat written again")
            self._failing = False

    async def _loop(self) -> None:
        while True:
            checkpoint()
            await asyncio.sleep(self.interval)
            await self._beat_logged()

    async def stop(self) -> None:
        """Stop beating. A clean stop removes this instance's keys (it is not a stale one);
        after a failure a last record says why, and expires like a stale one."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self.kv is None:
            return
        failed = any(_failure(self.system, role) for role in self.system.projectors)
        with contextlib.suppress(Exception):
            async with asyncio.timeout(2.0):
                if failed:
                    await self.beat()
                    return
                s = self.system.settings
                for role in self.system.projectors:
                    await self.kv.delete(f"{role}.{s.node_id}.{self.pid}")
