"""Retention of the Notify stream, held by its consumers (JetStream interest retention).

The stream keeps a message while some consumer still needs it, at most ``max_age`` (the
hold's limit, ``notify.max_retention_s``, 7 days). Who needs what:

* the **window** consumer (:data:`~streamproc.names.NOTIFY_WINDOW`) holds every message for
  the delivery window (``notify.max_age_s``, 24 h) — what every reader gets, registered or
  not. :class:`WindowKeeper` (run by every gateway) moves it to the first message still
  inside the window; what nobody else holds then goes;
* each live **registration** of the HTTP feed holds its tenant's messages of one kind past
  the position it last reported: a durable consumer filtered on that subject, moved to the
  reported position with ``CONSUMER.RESET`` (nats-server 2.14+) and renewed by each report;
  JetStream deletes it after ``notify.feed_lease_s`` (24 h) without a report
  (``inactive_threshold``), and with it the hold.
* durable consumers over NATS (``streamproc notify tail``) hold what they have not acknowledged.

A message held by nobody costs nothing beyond the window; a lagging registration costs the
messages of its own subject it has not reported yet.
"""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import UTC, datetime
from typing import Any

from streamproc.bus import jsapi, streams
from streamproc.bus.fastclient import FastClient
from streamproc.names import NOTIFY_WINDOW, feed_hold_consumer, notify_subject

log = logging.getLogger("streamproc.notify.retention")
NS = 1_000_000_000
TIMEOUT_S = 5.0


def rfc3339(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat().replace("+00:00", "Z")


def keeper_interval(max_age_s: float) -> float:
    """How often the window moves: a tenth of the window, between 1 s and 60 s."""
    return min(60.0, max(1.0, max_age_s / 10))


class Holds:
    """The window and the registrations' consumers of one Notify stream."""

    def __init__(self, nc: FastClient, prefix: str, stream: str) -> None:
        self.nc = nc
        self.prefix = prefix
        self.stream = stream

    async def info(self, consumer: str) -> dict[str, Any] | None:
        """A consumer's ``CONSUMER.INFO`` (asked of its leader); None when it does not exist."""
        try:
            return await jsapi.request(
                self.nc, f"CONSUMER.INFO.{self.stream}.{consumer}", timeout=TIMEOUT_S
            )
        except jsapi.JsApiError as exc:
            if exc.err_code != jsapi.CONSUMER_NOT_FOUND:
                raise
            return None

    async def window_floor(self) -> int:
        """The last sequence the window has let go: below it only what another consumer
        holds is left. 0 when the window consumer is missing (nothing let go that we know of
        — ``streams apply`` and the keeper make it again)."""
        info = await self.info(NOTIFY_WINDOW)
        return int(info.get("ack_floor", {}).get("stream_seq", 0)) if info else 0

    async def created(self, tenant: str, kind: str) -> str | None:
        """When the registration's holding consumer was made (None: there is none): a hold is
        unbroken while this stays the same."""
        info = await self.info(feed_hold_consumer(tenant, kind))
        return str(info.get("created", "")) if info else None

    async def hold(self, tenant: str, kind: str, seq: int, lease_s: float) -> str:
        """Hold the subject's messages after ``seq``: create the registration's consumer, or
        renew its lease (an update with the same config restarts JetStream's inactivity
        timer), then move it to ``seq + 1``. Returns the consumer's creation time."""
        name = feed_hold_consumer(tenant, kind)
        config: dict[str, Any] = {
            "durable_name": name,
            "description": f"HTTP feed registration of {tenant} {kind}: holds what it has not "
            "reported",
            "filter_subject": notify_subject(self.prefix, tenant, kind),
            "ack_policy": "explicit",
            "deliver_policy": "all",
            "inactive_threshold": int(lease_s * NS),
        }
        info = await jsapi.create_consumer(self.nc, self.stream, config)
        await jsapi.request(
            self.nc, f"CONSUMER.RESET.{self.stream}.{name}", {"seq": seq + 1}, TIMEOUT_S
        )
        return str(info.get("created", ""))


class WindowKeeper:
    """Moves the window consumer to the first message younger than ``max_age_s``."""

    def __init__(self, holds: Holds, max_age_s: float) -> None:
        self.holds = holds
        self.max_age_s = max_age_s

    async def step(self, now: float | None = None) -> int:
        """One move; returns the first sequence the window now holds."""
        nc, stream = self.holds.nc, self.holds.stream
        cutoff = (time.time() if now is None else now) - self.max_age_s
        try:
            doc = await jsapi.request(
                nc, f"STREAM.MSG.GET.{stream}", {"start_time": rfc3339(cutoff)}, TIMEOUT_S
            )
            first_kept = int(doc["message"]["seq"])
        except jsapi.JsApiError as exc:
            if exc.err_code != jsapi.NO_MESSAGE:
                raise
            info = await jsapi.stream_info(nc, stream)
            if info is None:
                return 0
            first_kept = info.state.last_seq + 1  # nothing is younger: let everything go
        window = await self.holds.info(NOTIFY_WINDOW)
        if window is None:
            window = await jsapi.create_consumer(nc, stream, streams.window_consumer())
            log.warning("the Notify window consumer was missing: made again")
        floor = int(window.get("ack_floor", {}).get("stream_seq", 0))
        if first_kept > floor + 1:  # only ever forward (another gateway may have moved it)
            await jsapi.request(
                nc, f"CONSUMER.RESET.{stream}.{NOTIFY_WINDOW}", {"seq": first_kept}, TIMEOUT_S
            )
        return first_kept

    async def run(self) -> None:
        """Every :func:`keeper_interval` until cancelled; a failed move is tried next time."""
        every = keeper_interval(self.max_age_s)
        while True:
            try:
                await self.step()
            except (jsapi.JsApiError, TimeoutError, OSError) as exc:
                log.warning("the Notify delivery window did not move (next try in %g s): %s",
                            every, exc)  # fmt: skip
            await asyncio.sleep(every)
