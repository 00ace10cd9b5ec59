"""Taking segments from the work queue fairly: one durable consumer per (tenant, priority).

Work items live at ``<prefix>.work.<tenant>.segment.<priority>``. Work-queue consumers must
not overlap, so each (tenant, priority) gets its own durable consumer with explicit acks,
``ack_wait`` (kept alive by ``+WPI`` heartbeats while a segment runs) and ``max_deliver``.
Consumers are discovered from the stream's subjects (at start, then periodically) and
from a core subscription on the work subjects, which also wakes an idle dispatcher at once.
A free worker gets the next segment round-robin across tenants, trying a tenant's
priorities most urgent first — so one tenant's backlog never starves another.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
from dataclasses import dataclass
from typing import Any

import msgspec
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeout

from streamproc.bus import jsapi
from streamproc.bus.fastclient import FastClient
from streamproc.ids import ascii_int
from streamproc.names import WORK, all_of, work_consumer, work_subject
from streamproc.runner.settings import RunnerSettings

consumer_name = work_consumer

log = logging.getLogger(__name__)
NS = 1_000_000_000


@dataclass(frozen=True)
class WorkItem:
    tenant: str
    priority: int
    subject: str
    data: bytes
    reply: str
    deliveries: int
    stream_seq: int


def ack_info(reply: str) -> tuple[int, int]:
    """(deliveries, stream sequence) from a ``$JS.ACK`` reply subject (v1 or v2 layout)."""
    tokens = reply.split(".")
    if len(tokens) == 9:
        return int(tokens[4]), int(tokens[5])
    return int(tokens[6]), int(tokens[7])


class WorkQueue:
    def __init__(self, nc: FastClient, prefix: str, stream: str, settings: RunnerSettings) -> None:
        self.nc = nc
        self.prefix = prefix
        self.stream = stream
        self.settings = settings
        self.tenants: dict[str, set[int]] = {}
        self._order: list[str] = []
        self._next_tenant = 0
        self._ready: set[tuple[str, int]] = set()
        self._wake = asyncio.Event()
        self._lock = asyncio.Lock()
        self._sub: Any = None
        self._inbox = ""
        self._replies: Any = None
        self._discovered_at = 0.0

    async def start(self) -> WorkQueue:
        self._sub = await self.nc.subscribe(work_subject(self.prefix, "*", "*"), cb=self._on_work)
        # Pulled messages arrive with their own subject, not the request's reply inbox, so
        # nats-py's request() cannot route them: fetch through one inbox subscription.
        self._inbox = self.nc.new_inbox()
        self._replies = await self.nc.subscribe(self._inbox)
        await self.discover()
        return self

    async def close(self) -> None:
        for sub in (self._sub, self._replies):
            if sub is not None:
                with contextlib.suppress(Exception):
                    await sub.unsubscribe()
        self._sub = self._replies = None

    def _parse(self, subject: str) -> tuple[str, int] | None:
        parts = subject.split(".")
        priority = ascii_int(parts[4]) if len(parts) == 5 and parts[3] == "segment" else None
        return None if priority is None else (parts[2], priority)

    async def _on_work(self, msg: Any) -> None:
        """A work item was published: make sure its consumer exists and wake the dispatcher."""
        parsed = self._parse(msg.subject)
        if parsed is not None:
            await self.ensure(*parsed)
            self._wake.set()

    async def discover(self) -> None:
        """Consumers for every (tenant, priority) subject holding messages."""
        self._discovered_at = asyncio.get_running_loop().time()
        try:
            doc = await jsapi.request(
                self.nc,
                f"STREAM.INFO.{self.stream}",
                {"subjects_filter": all_of(self.prefix, WORK)},
            )
        except jsapi.JsApiError as exc:
            log.warning("work stream %s: %s", self.stream, exc)
            return
        for subject in doc.get("state", {}).get("subjects") or {}:
            parsed = self._parse(subject)
            if parsed is not None:
                await self.ensure(*parsed)

    async def ensure(self, tenant: str, priority: int) -> None:
        if priority in self.tenants.get(tenant, ()):
            self._ready.add((tenant, priority))
            return
        s = self.settings
        config = {
            "durable_name": consumer_name(tenant, priority),
            "filter_subject": work_subject(self.prefix, tenant, priority),
            "ack_policy": "explicit",
            "ack_wait": int(s.ack_wait_s * NS),
            "max_deliver": s.max_deliver,
            "max_ack_pending": 1000,
            "deliver_policy": "all",
            "replay_policy": "instant",
        }
        try:
            await jsapi.create_consumer(self.nc, self.stream, config)
        except jsapi.JsApiError as exc:
            log.warning("cannot create consumer for %s/%d: %s", tenant, priority, exc)
            return
        if tenant not in self.tenants:
            self.tenants[tenant] = set()
            self._order.append(tenant)
        self.tenants[tenant].add(priority)
        self._ready.add((tenant, priority))

    async def _fetch(self, tenant: str, priority: int) -> WorkItem | None:
        subject = f"{jsapi.API}.CONSUMER.MSG.NEXT.{self.stream}.{consumer_name(tenant, priority)}"
        await self.nc.publish(subject, b'{"batch":1,"no_wait":true}', reply=self._inbox)
        try:
            msg = await self._replies.next_msg(timeout=5)
        except (NoRespondersError, NatsTimeout, TimeoutError):
            return None
        if not msg.reply or not msg.reply.startswith("$JS.ACK."):
            return None  # a status message: 404 no messages, 408, 409
        deliveries, seq = ack_info(msg.reply)
        return WorkItem(tenant, priority, msg.subject, msg.data, msg.reply, deliveries, seq)

    async def next(self) -> WorkItem:
        """The next segment for a free worker (waits while there is none)."""
        loop = asyncio.get_running_loop()
        while True:
            async with self._lock:
                item = await self._round()
            if item is not None:
                return item
            if loop.time() - self._discovered_at > self.settings.discovery_s:
                await self.discover()
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.settings.idle_poll_s)

    async def _round(self) -> WorkItem | None:
        """One pass over the tenants, starting after the one served last."""
        n = len(self._order)
        for i in range(n):
            tenant = self._order[(self._next_tenant + i) % n]
            for priority in sorted(self.tenants[tenant]):
                item = await self._fetch(tenant, priority)
                if item is not None:
                    self._next_tenant = (self._next_tenant + i + 1) % n
                    return item
        return None

    # ------------------------------------------------------------------ acknowledgements

    async def ack(self, item: WorkItem) -> None:
        await self.nc.publish(item.reply, b"+ACK")

    async def progress(self, item: WorkItem) -> None:
        await self.nc.publish(item.reply, b"+WPI")

    async def nak(self, item: WorkItem, delay_s: float) -> None:
        await self.nc.publish(item.reply, b'-NAK {"delay": %d}' % int(delay_s * NS))

    async def term(self, item: WorkItem) -> None:
        await self.nc.publish(item.reply, b"+TERM")


class MaxDeliveries(msgspec.Struct):
    """``io.nats.jetstream.advisory.v1.max_deliver``."""

    stream: str
    consumer: str
    stream_seq: int
    deliveries: int = 0


async def get_message(nc: FastClient, stream: str, seq: int) -> tuple[str, bytes] | None:
    """(subject, data) of a stored message, or None when it is gone."""
    try:
        doc = await jsapi.request(nc, f"STREAM.MSG.GET.{stream}", {"seq": seq})
    except jsapi.JsApiError:
        return None
    m = doc.get("message") or {}
    return m.get("subject", ""), base64.b64decode(m.get("data") or "")


async def delete_message(nc: FastClient, stream: str, seq: int) -> None:
    with contextlib.suppress(jsapi.JsApiError):
        await jsapi.request(nc, f"STREAM.MSG.DELETE.{stream}", {"seq": seq, "no_erase": True})
