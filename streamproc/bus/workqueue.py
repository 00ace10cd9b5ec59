"""Taking work items from a work-queue stream fairly: one durable pull consumer per
(tenant, priority), batches as large as the free workers, and every answer through
:func:`streamproc.bus.pull.acknowledge`.

Items live at ``<prefix>.work.<tenant>.segment.<priority>``. Work-queue consumers must not
overlap, so each (tenant, priority) gets its own durable consumer with explicit acks,
``ack_wait`` (kept alive by ``progress`` while an item is worked on) and ``max_deliver``.
Consumers are discovered from the stream's subjects (at start, then periodically) and from a
core subscription on the work subjects, which also wakes idle workers at once.

Workers waiting together are served together: one round over the tenants, starting after
the one served last, asks each for its share of the free workers, most urgent priority
first — so one tenant's backlog never starves another, and ten idle workers over one
tenant's backlog take ten items with one request (:meth:`PullLoop.fetch`) instead of ten.
Nothing is taken ahead of a free worker: an item waits in the stream, not in a runner that
might die holding it.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import math
from collections import deque
from dataclasses import dataclass
from typing import Any

import msgspec

from streamproc.bus import ack, jsapi
from streamproc.bus.fastclient import FastClient
from streamproc.bus.pull import (
    DATA,
    REPLY,
    SUBJECT,
    AckKind,
    ConsumerGone,
    PullLoop,
    RawMessage,
    acknowledge,
)
from streamproc.cancellation import checkpoint
from streamproc.ids import ascii_int
from streamproc.names import RUNNER, WORK, all_of, work_consumer, work_subject

log = logging.getLogger(__name__)
NS = 1_000_000_000
FETCH_TIMEOUT_S = 5.0


@dataclass(frozen=True, slots=True)
class WorkItem:
    tenant: str
    priority: int
    subject: str
    data: bytes
    reply: str
    deliveries: int
    stream_seq: int


@dataclass(frozen=True)
class QueueConfig:
    """What every (tenant, priority) consumer is created with, and how often to look."""

    group: str = RUNNER
    """Consumer names are ``<group>_<tenant>_p<priority>``."""
    ack_wait_s: float = 30.0
    max_deliver: int = 5
    max_ack_pending: int = 1000
    discovery_s: float = 1.0
    """How often the stream's subjects are listed for new (tenant, priority) pairs."""
    idle_poll_s: float = 0.1
    """How often idle workers look again without being woken."""


def parse_work_subject(subject: str) -> tuple[str, int] | None:
    """(tenant, priority) of ``<prefix>.work.<tenant>.segment.<priority>``, else None."""
    parts = subject.split(".")
    ok = len(parts) == 5 and parts[1] == WORK and parts[3] == "segment"
    priority = ascii_int(parts[4]) if ok else None
    return None if priority is None else (parts[2], priority)


def to_item(tenant: str, priority: int, m: RawMessage) -> WorkItem:
    info = ack.parse(m[REPLY])
    return WorkItem(
        tenant,
        priority,
        m[SUBJECT].decode(),
        m[DATA],
        m[REPLY].decode(),
        info.delivered,
        info.stream_seq,
    )


class WorkQueueConsumer:
    """Fair, batched consumption of a work-queue stream by one process's workers."""

    def __init__(
        self, nc: FastClient, prefix: str, stream: str, config: QueueConfig | None = None
    ) -> None:
        self.nc = nc
        self.prefix = prefix
        self.stream = stream
        self.config = config or QueueConfig()
        self.tenants: dict[str, dict[int, PullLoop]] = {}
        """Known consumers: tenant → priority → its pull loop."""
        self._order: list[str] = []
        self._next_tenant = 0
        self._taken: deque[WorkItem] = deque()
        """Items fetched for workers that are about to pick them up."""
        self._waiting = 0
        self._wake = asyncio.Event()
        self._lock = asyncio.Lock()
        self._sub: Any = None
        self._discovered_at = 0.0

    async def start(self) -> WorkQueueConsumer:
        self._sub = await self.nc.subscribe(work_subject(self.prefix, "*", "*"), cb=self._on_work)
        await self.discover()
        return self

    async def close(self) -> None:
        if self._sub is not None:
            with contextlib.suppress(Exception):
                await self._sub.unsubscribe()
            self._sub = None
        while self._taken:  # fetched but never started: another worker may have them now
            with contextlib.suppress(Exception):
                await self.nak(self._taken.popleft(), 0.0)
        for loops in self.tenants.values():
            for loop in loops.values():
                await loop.close()
        self.tenants.clear()
        self._order.clear()

    async def _on_work(self, msg: Any) -> None:
        """An item was published: make sure its consumer exists and wake idle workers."""
        parsed = parse_work_subject(msg.subject)
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
            parsed = parse_work_subject(subject)
            if parsed is not None:
                await self.ensure(*parsed)

    async def ensure(self, tenant: str, priority: int) -> None:
        if priority in self.tenants.get(tenant, {}):
            return
        c = self.config
        name = work_consumer(tenant, priority, c.group)
        config = {
            "durable_name": name,
            "filter_subject": work_subject(self.prefix, tenant, priority),
            "ack_policy": "explicit",
            "ack_wait": int(c.ack_wait_s * NS),
            "max_deliver": c.max_deliver,
            "max_ack_pending": c.max_ack_pending,
            "deliver_policy": "all",
            "replay_policy": "instant",
        }
        try:
            await jsapi.create_consumer(self.nc, self.stream, config)
        except jsapi.JsApiError as exc:
            log.warning("cannot create consumer for %s/%d: %s", tenant, priority, exc)
            return
        if priority in self.tenants.get(tenant, {}):
            return  # created meanwhile by a concurrent ensure
        loop = await PullLoop(self.nc, self.stream, name, outstanding=0).start()
        if tenant not in self.tenants:
            self.tenants[tenant] = {}
            self._order.append(tenant)
        self.tenants[tenant][priority] = loop

    async def _forget(self, tenant: str, priority: int) -> None:
        """A consumer the server no longer has: the next discovery creates it again."""
        loop = self.tenants.get(tenant, {}).pop(priority, None)
        if loop is not None:
            await loop.close()

    # ------------------------------------------------------------------ taking items

    async def next(self) -> WorkItem:
        """The next item for a free worker (waits while there is none)."""
        loop = asyncio.get_running_loop()
        self._waiting += 1
        try:
            while True:
                checkpoint()
                if self._taken:
                    return self._taken.popleft()
                await asyncio.sleep(0)  # workers freed in the same instant ask together
                async with self._lock:
                    if not self._taken:
                        self._taken.extend(await self._round(self._waiting))
                if self._taken:
                    return self._taken.popleft()
                if loop.time() - self._discovered_at > self.config.discovery_s:
                    await self.discover()
                self._wake.clear()
                # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancellation
                # (the process stopping) that arrives as the wait ends.
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.config.idle_poll_s):
                        await self._wake.wait()
        finally:
            self._waiting -= 1

    async def _round(self, want: int) -> list[WorkItem]:
        """Up to ``want`` items, spread over the tenants starting after the one served last;
        a tenant that gave its full share is asked again while items are still wanted."""
        n = len(self._order)
        active = [self._order[(self._next_tenant + i) % n] for i in range(n)]
        got: list[WorkItem] = []
        last: str | None = None
        while active and len(got) < want:
            again = []
            for i, tenant in enumerate(active):
                left = want - len(got)
                if left <= 0:
                    break
                share = math.ceil(left / (len(active) - i))
                items = await self._take(tenant, share)
                if items:
                    got.extend(items)
                    last = tenant
                if len(items) == share:
                    again.append(tenant)
            active = again
        if last is not None:
            self._next_tenant = (self._order.index(last) + 1) % n
        return got

    async def _take(self, tenant: str, n: int) -> list[WorkItem]:
        """Up to ``n`` of the tenant's items, most urgent priority first."""
        out: list[WorkItem] = []
        for priority, loop in sorted(self.tenants.get(tenant, {}).items()):
            try:
                msgs = await loop.fetch(n - len(out), FETCH_TIMEOUT_S)
            except ConsumerGone as exc:
                log.warning("%s", exc)
                await self._forget(tenant, priority)
                continue
            out.extend(to_item(tenant, priority, m) for m in msgs)
            if len(out) >= n:
                break
        return out

    # ------------------------------------------------------------------ answers

    async def answer(self, item: WorkItem, kind: AckKind, delay_s: float | None = None) -> None:
        await acknowledge(self.nc, item.reply, kind, delay_s)

    async def ack(self, item: WorkItem) -> None:
        await self.answer(item, "ack")

    async def progress(self, item: WorkItem) -> None:
        await self.answer(item, "progress")

    async def nak(self, item: WorkItem, delay_s: float) -> None:
        await self.answer(item, "nak", delay_s)

    async def term(self, item: WorkItem) -> None:
        await self.answer(item, "term")


# ---------------------------------------------------------------------- dead letters


class MaxDeliveries(msgspec.Struct):
    """``io.nats.jetstream.advisory.v1.max_deliver``."""

    stream: str
    consumer: str
    stream_seq: int
    deliveries: int = 0


def max_deliveries_subject(stream: str) -> str:
    """Where the server announces items of ``stream`` that exhausted ``max_deliver``."""
    return f"$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.{stream}.*"


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
