"""The reader side: every instance's record, its health, and the table or JSON of them."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import msgspec
from nats.js.errors import BucketNotFoundError

from streamproc import exitcodes
from streamproc.bus import jsapi
from streamproc.bus.fastclient import FastClient
from streamproc.config import Settings
from streamproc.runtime.projection import describe_rejections
from streamproc.status.partitions import partition_owners
from streamproc.status.partitions import render as render_partitions
from streamproc.status.record import (
    SKEW_MARGIN_S,
    STALE_INTERVALS,
    Heartbeat,
    bucket_name,
    decode,
)

EXIT_UNHEALTHY = exitcodes.FAILED


async def read_heartbeats(nc: FastClient, prefix: str) -> list[Heartbeat] | None:
    """Every live record of the bucket (None when the bucket does not exist)."""
    try:
        kv = await nc.jetstream().key_value(bucket_name(prefix))
    except BucketNotFoundError:
        return None
    watcher = await kv.watchall(ignore_deletes=True)
    out: list[Heartbeat] = []
    try:
        async for entry in watcher:
            if entry is None:  # the initial values are all delivered
                break
            if entry.value:
                with contextlib.suppress(msgspec.DecodeError):
                    out.append(decode(entry.value))
    finally:
        await watcher.stop()  # type: ignore[no-untyped-call]  # nats-py leaves it unannotated
    return sorted(out, key=lambda h: (h.role, h.node, h.pid))


@dataclass
class Instance:
    beat: Heartbeat
    health: str
    """ok | lagging | degraded | failed | stale"""
    age_s: float


@dataclass
class Report:
    instances: list[Instance]
    missing: list[str]
    """Expected roles with no instance at all."""
    inactive: list[str]
    """Roles behind a lease whose live instances are all standby."""
    stream: str = ""
    head: int | None = None
    problems: list[str] = field(default_factory=list)
    partitions: list[str] = field(default_factory=list)
    """With ``planner.partitions`` > 1: who holds each planner partition."""
    owners: dict[str, str] = field(default_factory=dict)
    """The same as ``k/N`` → holder."""

    @property
    def ok(self) -> bool:
        return not self.problems


def health_of(beat: Heartbeat, now_ms: int) -> tuple[str, float]:
    age = max(0.0, (now_ms - beat.updated_ms) / 1000)
    if age > STALE_INTERVALS * beat.interval_s + SKEW_MARGIN_S:
        return "stale", age
    if beat.failure:
        return "failed", age
    if beat.lag_limit and beat.lag > beat.lag_limit:
        return "lagging", age
    if beat.problems:
        return "degraded", age
    return "ok", age


def assess(beats: Iterable[Heartbeat], expected: Iterable[str], now_ms: int) -> Report:
    """Health of every instance, and which roles are missing or have no active instance."""
    instances = [Instance(b, *health_of(b, now_ms)) for b in beats]
    seen = {i.beat.role for i in instances}
    missing = sorted(set(expected) - seen)
    inactive = []
    for role in sorted(seen):
        live = [i for i in instances if i.beat.role == role and i.health != "stale"]
        if any(i.beat.lease is not None for i in live) and not any(
            i.beat.lease == "active" for i in live
        ):
            inactive.append(role)
    problems = [
        f"{i.beat.role} {i.beat.instance}: {i.health}"
        + (f" ({i.beat.failure})" if i.health == "failed" else "")
        + (f" ({'; '.join(i.beat.problems)})" if i.health == "degraded" else "")
        for i in instances
        if i.health != "ok"
    ]
    problems += [f"{r}: no running instance" for r in missing]
    problems += [f"{r}: no active instance (all standby)" for r in inactive]
    return Report(instances, missing, inactive, problems=problems)


HEALTH_TEXT = {"stale": "stale heartbeat"}


def render(report: Report) -> str:
    head = "ROLE INSTANCE POSITION HEAD LAG HEALTH LEASE SEEN HTTP REJECTED"
    rows = [head.split()]
    for i in report.instances:
        b = i.beat
        rows.append(
            [
                b.role,
                b.instance,
                str(b.applied),
                str(b.head),
                str(b.lag),
                HEALTH_TEXT.get(i.health, i.health),
                b.lease or "-",
                f"{i.age_s:.0f}s ago",
                b.http_url or "-",
                str(sum(n for per in b.rejections.values() for n in per.values())),
            ]
        )
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
    lines = []
    if report.stream:
        head = "missing" if report.head is None else str(report.head)
        lines.append(f"stream {report.stream}: head {head}")
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    if not report.instances:
        lines.append("(no role instance is running)")
    lines += [
        f"rejected: {i.beat.role} {i.beat.instance}: {describe_rejections(i.beat.rejections)}"
        for i in report.instances
        if describe_rejections(i.beat.rejections)
    ]
    lines += [
        f"note: {i.beat.role} {i.beat.instance}: {n}"
        for i in report.instances
        for n in i.beat.notes
    ]
    lines += report.partitions
    lines += [f"problem: {p}" for p in report.problems]
    return "\n".join(lines)


def as_json(report: Report) -> dict[str, Any]:
    return {
        "ok": report.ok,
        "stream": report.stream,
        "head": report.head,
        "instances": [
            {**msgspec.to_builtins(i.beat), "health": i.health, "age_s": round(i.age_s, 1)}
            for i in report.instances
        ],
        "missing": report.missing,
        "inactive": report.inactive,
        "problems": report.problems,
        "partitions": report.owners,
    }


async def gather(
    nc: FastClient, settings: Settings, expected: Iterable[str], partitions: int = 1
) -> Report | None:
    """``partitions``: ``planner.partitions``, to list each partition's holder (or none)."""
    beats = await read_heartbeats(nc, settings.prefix)
    if beats is None:
        return None
    report = assess(beats, expected, time.time_ns() // 1_000_000)
    report.stream = settings.events_stream
    info = await jsapi.stream_info(nc, settings.events_stream)
    report.head = info.state.last_seq if info is not None else None
    owners = await partition_owners(nc, settings.prefix)
    if partitions > 1 or owners:
        report.partitions = render_partitions(owners, partitions)
        report.owners = {f"{k}/{n}": holder for (k, n), holder in sorted(owners.items())}
    return report
