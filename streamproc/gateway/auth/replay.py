"""Replay protection shared by every gateway replica.

Webhook delivery ids (per source) and DPoP proof ``jti``s (per key) are claimed in one
JetStream KV bucket, ``<prefix>_replay`` (:mod:`streamproc.bus.ttlkv`), until they could no
longer pass their time-window check anyway. A claim refused because the id exists is the
replay — whichever replica saw the id first — so a replay is refused the same way on every
replica. Nothing is remembered in one process's memory only. (When each is claimed — a proof
before its request acts, a delivery once its export is recorded — is for
:mod:`~streamproc.gateway.auth.dpop` and :mod:`~streamproc.gateway.auth.webhooks` to say.)

One client — a webhook source, a DPoP key — may hold at most ``replay_per_client`` live ids
through each replica (counted here, before anything is stored), so no single client can
fill the bucket for the others; beyond that its requests get 429 until its oldest ids
expire. With N replicas a client holds at most N times that; the bucket's own bound
(``replay_cache_size``, refused with 503 when reached) covers everyone together.
"""

from __future__ import annotations

import hashlib
import heapq
import logging
import math
import time
from collections.abc import Callable

from streamproc.bus import streams
from streamproc.bus.fastclient import FastClient
from streamproc.bus.ttlkv import (
    BucketFull,
    BucketUnavailable,
    KeyTaken,
    TtlBucket,
    definition,
)
from streamproc.gateway.settings import GatewaySettings
from streamproc.names import replay_bucket
from streamproc.problems import ProblemError

bucket_name = replay_bucket

log = logging.getLogger("streamproc.gateway.replay")  # the name log filters know it by
SWEEP_EVERY_S = 1.0


def bucket_definition(prefix: str, *, replicas: int, max_keys: int) -> dict[str, object]:
    return definition(
        bucket_name(prefix),
        replicas=replicas,
        max_keys=max_keys,
        description="streamproc gateways: webhook delivery ids and DPoP proof ids, until expiry",
    )


def default_bucket_definition(prefix: str, replicas: int) -> dict[str, object]:
    """With the default bound: what ``streamproc streams export`` writes for operators."""
    return bucket_definition(
        prefix, replicas=replicas, max_keys=GatewaySettings().replay_cache_size
    )


class Replayed(Exception):
    """The id was claimed before (through this replica or another) and is still live."""


class ClientShare:
    """How many live ids each client holds through this replica; pure bookkeeping."""

    def __init__(self, limit: int, clock: Callable[[], float] = time.time) -> None:
        self.limit = limit
        self._clock = clock
        self._live: dict[str, list[float]] = {}
        self._swept = 0.0

    def live(self, client: str) -> int:
        self._expire(client, self._clock())
        return len(self._live.get(client, ()))

    def check(self, client: str) -> list[float]:
        """:class:`ProblemError` 429 (with ``Retry-After``: when its oldest id expires) if
        ``client`` holds its limit already; else its live ids."""
        now = self._clock()
        if now - self._swept >= SWEEP_EVERY_S:
            self._sweep(now)
        heap = self._expire(client, now)
        if len(heap) >= self.limit:
            wait = max(1, math.ceil(heap[0] - now))
            raise ProblemError(
                429,
                "client-quota",
                f"this client holds {len(heap)} live request ids (limit {self.limit}); "
                f"retry in {wait} s",
                headers={"Retry-After": str(wait)},
                limit=self.limit,
            )
        return heap

    def take(self, client: str, expires_at: float) -> None:
        """Count one more id for ``client`` until ``expires_at`` (after :meth:`check`)."""
        heap = self.check(client)
        heapq.heappush(heap, expires_at)
        self._live[client] = heap

    def give_back(self, client: str, expires_at: float) -> None:
        """Undo one :meth:`take` (the id was not stored)."""
        heap = self._live.get(client)
        if heap and expires_at in heap:
            heap.remove(expires_at)
            heapq.heapify(heap)
            if not heap:
                del self._live[client]

    def _expire(self, client: str, now: float) -> list[float]:
        heap = self._live.get(client, [])
        while heap and heap[0] <= now:
            heapq.heappop(heap)
        return heap

    def _sweep(self, now: float) -> None:
        """Forget clients whose ids have all expired (they may never come back)."""
        self._swept = now
        for client in list(self._live):
            if not self._expire(client, now):
                del self._live[client]


class ReplayGuard:
    """First-wins claims of request ids, shared by every replica through ``bucket``."""

    def __init__(
        self, bucket: TtlBucket, per_client: int, clock: Callable[[], float] = time.time
    ) -> None:
        self.bucket = bucket
        self.share = ClientShare(per_client, clock)
        self._clock = clock

    async def open(self, nc: FastClient, config: dict[str, object]) -> None:
        """Create the bucket if missing (or bring its limit to ``config``'s)."""
        for result in await streams.apply(nc, [config]):
            if result.action == "drift":
                log.warning("replay bucket %s drift: %s", result.stream, result.describe())

    async def seen(self, kind: str, client: str, request_id: str) -> bool:
        """Whether ``request_id`` is claimed now (a look, claiming nothing); 503 if NATS did
        not say."""
        try:
            return await self.bucket.exists(_key(kind, client, request_id))
        except BucketUnavailable as exc:
            raise _unavailable(exc) from None

    async def claim(self, kind: str, client: str, request_id: str, expires_at: float) -> None:
        """Claim ``request_id`` of ``client`` until ``expires_at``; :class:`Replayed` if it
        is live already; :class:`ProblemError` 429 (this client's share is full) or 503
        (the bucket is full, or NATS did not answer: refused rather than unchecked)."""
        self.share.take(client, expires_at)
        try:
            await self.bucket.claim(_key(kind, client, request_id), expires_at - self._clock())
        except KeyTaken:
            self.share.give_back(client, expires_at)
            raise Replayed(request_id) from None
        except BucketFull:
            self.share.give_back(client, expires_at)
            raise ProblemError(
                503, "busy", "the replay bucket is full; retry", headers={"Retry-After": "5"}
            ) from None
        except BucketUnavailable as exc:
            self.share.give_back(client, expires_at)
            raise _unavailable(exc) from None


def _key(kind: str, client: str, request_id: str) -> str:
    """The id hashed: any characters may be in it, none of them reach a subject."""
    return f"{kind}.{client}.{hashlib.sha256(request_id.encode()).hexdigest()[:40]}"


def _unavailable(exc: BucketUnavailable) -> ProblemError:
    log.warning("replay check unavailable: %s", exc)
    return ProblemError(
        503,
        "replay-check-unavailable",
        "the replay check could not be made (NATS did not answer); retrying is safe",
        headers={"Retry-After": "1"},
    )
