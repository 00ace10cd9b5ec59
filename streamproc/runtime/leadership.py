"""Active/standby for the roles that must act in one place (planner, auditor).

Every instance of such a role folds its projections all the time, so a standby is warm. Only
the instance holding the role's lease (:mod:`streamproc.runtime.lease`, key = the role name) runs
the role's reactors, and only once its projections have caught up with the stream head as
it was when the lease was taken. The reactors stop before their next pass as soon as the
lease is lost or could not be renewed in time; a clean stop releases the lease, so the
standby takes over within its poll interval instead of the TTL.

Taking over may redo the last thing the old active did (it may have died between
publishing and folding back): reactors derive every event id from its cause, so JetStream
de-duplicates the redo.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Literal

from streamproc import metrics
from streamproc.bus import jsapi
from streamproc.bus.fastclient import FastClient
from streamproc.cancellation import checkpoint
from streamproc.config import Settings
from streamproc.runtime.lease import Lease, NatsFailure, holder_id, open_bucket, ttl_from
from streamproc.runtime.projector import Projector

log = logging.getLogger(__name__)

State = Literal["active", "catching-up", "standby"]
STANDBY_POLL_S = 1.0
"""A standby tries to take the lease at least this often (and every TTL/3 when shorter)."""
MIN_PAUSE_S = 0.05
"""Between attempts to renew a lease that NATS did not confirm (no busy loop)."""


class Leadership:
    """The lease of one role in this process, and whether its reactors may run now."""

    def __init__(self, nc: FastClient, role: str, stream: str, proj: Projector, lease: Lease):
        self.nc = nc
        self.role = role
        self.stream = stream
        self.proj = proj
        self.lease = lease
        self._target: int | None = None
        """The stream head when the lease was taken: we act once we have applied it."""
        self._promoted = False
        self._active = asyncio.Event()
        self._stopped = False

    @classmethod
    async def open(
        cls, nc: FastClient, settings: Settings, role: str, proj: Projector
    ) -> Leadership:
        """Open (or create) the lease bucket, replicated like the event stream, and make a
        first attempt at the lease, so a lone instance is active right after start."""
        replicas = await jsapi.stream_replicas(nc, settings.events_stream)
        kv, ttl = await open_bucket(
            nc, settings.prefix, settings.configuration.built(ttl_from), replicas=replicas
        )
        lease = Lease(kv, role, holder_id(settings.node_id), ttl)
        self = cls(nc, role, settings.events_stream, proj, lease)
        metrics.LEASE_HELD.labels(role).set(0)
        await self.step()
        if not lease.held():
            holder = await lease.current_holder()
            log.info("%s: standby; the lease is held by %s", role, holder or "nobody yet")
        return self

    @property
    def state(self) -> State:
        if self.active():
            return "active"
        return "catching-up" if self.lease.held() else "standby"

    def active(self) -> bool:
        """Whether the role's reactors may run now (checked before every reactor pass)."""
        return self._promoted and self.lease.held()

    async def wait_active(self) -> None:
        while True:
            checkpoint()
            await self._active.wait()
            if self.active():
                return
            self._demote("the lease ran out before it could be renewed")

    async def run(self) -> None:
        """Keep the lease (or try to take it) until cancelled."""
        try:
            while not self._stopped:
                checkpoint()
                await self.step()
                await self._pause()
        finally:
            metrics.LEASE_HELD.labels(self.role).set(0)

    async def step(self) -> None:
        if self.lease.revision is not None:
            if not await self.lease.renew():
                self._demote("another instance holds it now, or it could not be renewed")
        elif await self.lease.acquire():
            self._target = None
            log.info(
                "%s: lease taken (%s); catching up before acting", self.role, self.lease.holder
            )
        if self.lease.held():
            await self._check_caught_up()
        elif self._promoted:
            self._demote("it could not be renewed within its TTL")

    async def _check_caught_up(self) -> None:
        if self._promoted:
            return
        if self._target is None:
            try:
                info = await jsapi.stream_info(self.nc, self.stream)
            except (jsapi.JsApiError, *NatsFailure) as exc:
                log.warning("%s: stream head unknown (%s); not acting yet", self.role, exc)
                return
            if info is None:
                return
            self._target = info.state.last_seq
            self.proj.head = max(self.proj.head, self._target)
        if self.proj.applied >= self._target:
            self._promote()

    async def _pause(self) -> None:
        if self.lease.revision is None:
            await asyncio.sleep(min(self.lease.renew_every, STANDBY_POLL_S))
            return
        renew_at = self.lease.valid_until - 2 * self.lease.renew_every
        due = max(MIN_PAUSE_S, renew_at - self.lease.clock())
        if self._promoted or self._target is None:
            await asyncio.sleep(due)
            return
        # Catching up: wake as soon as the target is applied, but renew on time.
        with contextlib.suppress(TimeoutError):
            await self.proj.wait_for(self._target, due)

    def _promote(self) -> None:
        self._promoted = True
        self._active.set()
        metrics.LEASE_HELD.labels(self.role).set(1)
        metrics.LEASE_TAKEOVERS.labels(self.role).inc()
        log.info(
            "%s: active (lease %s, caught up to %d)", self.role, self.lease.holder, self._target
        )
        self.proj.committed.set()  # wake the reactor loop now

    def _demote(self, why: str) -> None:
        if not self._promoted and not self._active.is_set():
            self._target = None
            return
        self._promoted = False
        self._active.clear()
        self._target = None
        metrics.LEASE_HELD.labels(self.role).set(0)
        log.warning("%s: lost the lease (%s); standby, reactors stopped", self.role, why)

    async def close(self) -> None:
        """Stop acting and release the lease (the process is stopping)."""
        self._stopped = True
        was = self._promoted
        self._promoted = False
        self._active.clear()
        metrics.LEASE_HELD.labels(self.role).set(0)
        await self.lease.release()
        if was:
            log.info("%s: lease released", self.role)
