"""A well-behaved Feedser sender for the fault tests: signed exports at a steady rate, each
retried on 5xx (after Retry-After) with the same delivery id and body until it is answered
2xx or its deadline passes; every attempt is recorded for the assertions and the figures."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import msgspec

from tests.gateway.harness import BASE, signed_headers

FEEDSER = f"{BASE}/events/feedser-export"
REF = "feedser-main:"
"""How the harness's source prefixes its export ids in subjects and keys (an export ref)."""


def export_body(export_id: str, product_keys: list[str] | None = None) -> bytes:
    keys = product_keys or ["pkg:deb/debian/zlib"]
    return msgspec.json.encode({"exportId": export_id, "changedProductKeys": keys, "kev": []})


@dataclass
class Attempt:
    sent: float
    done: float
    status: int
    body: Any


@dataclass
class Delivery:
    export_id: str
    attempts: list[Attempt] = field(default_factory=list)

    @property
    def final(self) -> Attempt:
        return self.attempts[-1]

    @property
    def acknowledged(self) -> bool:
        """Answered 2xx, or ``409 replayed-delivery`` to a resend after an attempt that got no
        answer: the delivery id is claimed only once its export is recorded (docs/api.md,
        Replays), so that 409 says the lost attempt was recorded."""
        return bool(self.attempts) and (200 <= self.final.status < 300 or self.recorded_earlier)

    @property
    def recorded_earlier(self) -> bool:
        f = self.final
        return (
            f.status == 409
            and isinstance(f.body, dict)
            and str(f.body.get("type", "")).endswith("replayed-delivery")
            and any(a.status == 0 or a.status >= 500 for a in self.attempts[:-1])
        )


class Sender:
    """Posts exports to ``url`` (a gateway base URL) and keeps every attempt."""

    def __init__(self, url: str, *, deadline_s: float = 60.0, connections: int = 256) -> None:
        self.url = url
        self.deadline_s = deadline_s
        self.session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=connections),
            timeout=aiohttp.ClientTimeout(total=deadline_s),
        )
        self.deliveries: dict[str, Delivery] = {}

    async def close(self) -> None:
        await self.session.close()

    async def deliver(self, export_id: str, product_keys: list[str] | None = None) -> Delivery:
        d = self.deliveries.setdefault(export_id, Delivery(export_id))
        body = export_body(export_id, product_keys)
        delivery_id = f"dl-{export_id}"
        give_up = time.monotonic() + self.deadline_s
        while True:
            sent = time.monotonic()
            headers = signed_headers(body, delivery=delivery_id)  # fresh timestamp, same id
            try:
                async with self.session.post(self.url + FEEDSER, data=body, headers=headers) as r:
                    raw = await r.read()
                    status = r.status
                    retry_after = float(r.headers.get("Retry-After", "1"))
            except (aiohttp.ClientError, TimeoutError) as exc:
                status, raw, retry_after = 0, repr(exc).encode(), 1.0
            doc = msgspec.json.decode(raw) if raw[:1] == b"{" else raw
            d.attempts.append(Attempt(sent, time.monotonic(), status, doc))
            if status < 500 and status != 0:
                return d
            if time.monotonic() + retry_after > give_up:
                return d
            await asyncio.sleep(retry_after)

    async def steady(
        self, export_ids: list[str], rate: float, keys: list[str] | None = None
    ) -> list[Delivery]:
        """Start one delivery every 1/rate seconds (not waiting for answers), then wait;
        export i names product key ``keys[i % len(keys)]``."""
        start = time.monotonic()
        tasks = []
        for i, export_id in enumerate(export_ids):
            delay = start + i / rate - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            named = [keys[i % len(keys)]] if keys else None
            tasks.append(asyncio.create_task(self.deliver(export_id, named)))
        return list(await asyncio.gather(*tasks))


def summary(deliveries: list[Delivery], since: float) -> dict[str, float]:
    """Figures for docs/cluster.md: 5xx answers, retried exports, and how long after
    ``since`` (the fault) the write path was back (first 2xx of an attempt sent after it)."""
    attempts = [a for d in deliveries for a in d.attempts]
    after = [a for a in attempts if a.sent >= since and 200 <= a.status < 300]
    latencies = sorted(a.done - a.sent for a in attempts if 200 <= a.status < 300)
    before = sorted(a.done - a.sent for a in attempts if a.sent < since and a.status < 300)
    failures = [a for a in attempts if a.status >= 500 or a.status == 0]
    return {
        "exports": len(deliveries),
        "acknowledged": sum(d.acknowledged for d in deliveries),
        "answers_5xx": sum(1 for a in failures if a.status >= 500),
        "connection_errors": sum(1 for a in failures if a.status == 0),
        "retried_exports": sum(1 for d in deliveries if len(d.attempts) > 1),
        "write_path_back_after_s": round(min(a.done for a in after) - since, 2) if after else -1,
        "last_5xx_after_s": round(max((a.done for a in failures), default=since) - since, 2),
        "p50_2xx_before_fault_ms": round(1000 * before[len(before) // 2], 1) if before else -1,
        "p50_2xx_ms": round(1000 * latencies[len(latencies) // 2], 1) if latencies else -1,
        "max_2xx_ms": round(1000 * latencies[-1], 1) if latencies else -1,
    }
