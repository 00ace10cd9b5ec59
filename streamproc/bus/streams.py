"""The three streams of the design, as code and as operator JSON, applied idempotently.

``apply`` creates what is missing, updates what JetStream lets us change, and reports as
drift what it cannot (retention, storage, turning deny flags off) instead of failing silently.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from nats.aio.client import Client

from streamproc.bus import jsapi

NS = 1_000_000_000
HOUR = 3600 * NS
IMMUTABLE = ("name", "retention", "storage")
ONE_WAY = ("deny_delete", "deny_purge")
"""Flags that can be switched on after creation but never off."""


def stream_names(prefix: str) -> tuple[str, str, str]:
    base = prefix.upper().replace(".", "_").replace("-", "_")
    return base, f"{base}_WORK", f"{base}_NOTIFY"


def definitions(prefix: str = "scheduler", replicas: int = 1) -> list[dict[str, Any]]:
    """Stream configs in the JetStream API's JSON form (durations in nanoseconds)."""
    events, work, notify = stream_names(prefix)
    return [
        {
            "name": events,
            "description": "The event log: schedules, exports, images, runs, verdicts, audit",
            "subjects": [f"{prefix}.events.>"],
            "retention": "limits",
            "storage": "file",
            "num_replicas": replicas,
            "max_msgs": -1,
            "max_bytes": -1,
            "max_age": 0,
            "max_msgs_per_subject": -1,
            "max_msg_size": 8 * 1024 * 1024,
            "discard": "new",
            "duplicate_window": HOUR,
            "deny_delete": True,
            "deny_purge": False,
            "allow_rollup_hdrs": False,
            "allow_direct": True,
        },
        {
            "name": work,
            "description": "Run segments handed to runners (work queue)",
            "subjects": [f"{prefix}.work.>"],
            "retention": "workqueue",
            "storage": "file",
            "num_replicas": replicas,
            "max_msgs": -1,
            "max_bytes": -1,
            "max_age": 7 * 24 * HOUR,
            "max_msg_size": 8 * 1024 * 1024,
            "discard": "new",
            "duplicate_window": HOUR,
            "deny_delete": False,
            "deny_purge": False,
        },
        {
            "name": notify,
            "description": "What Notify consumes: rescan.delta, report.ready, run.summary",
            "subjects": [f"{prefix}.notify.>"],
            "retention": "limits",
            "storage": "file",
            "num_replicas": replicas,
            "max_msgs": -1,
            "max_bytes": -1,
            "max_age": 24 * HOUR,
            "max_msg_size": 8 * 1024 * 1024,
            "discard": "old",
            "duplicate_window": HOUR,
            "deny_delete": False,
            "deny_purge": False,
        },
    ]


@dataclass
class ApplyResult:
    stream: str
    action: str  # created | updated | unchanged | drift
    changed: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    drift: dict[str, tuple[Any, Any]] = field(default_factory=dict)

    def describe(self) -> str:
        parts = [f"{k}: {a!r} -> {b!r}" for k, (a, b) in self.changed.items()]
        parts += [f"DRIFT {k}: running {a!r}, wanted {b!r}" for k, (a, b) in self.drift.items()]
        return "; ".join(parts)


def diff(have: dict[str, Any], want: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Split the differences into (updatable, drift)."""
    changed: dict[str, tuple[Any, Any]] = {}
    drift: dict[str, tuple[Any, Any]] = {}
    for k, v in want.items():
        current = have.get(k)
        if k == "description" and not current and not v:
            continue
        if current == v:
            continue
        if k in IMMUTABLE or (k in ONE_WAY and current and not v):
            drift[k] = (current, v)
        else:
            changed[k] = (current, v)
    return changed, drift


async def apply(nc: Client, configs: list[dict[str, Any]]) -> list[ApplyResult]:
    results = []
    for want in configs:
        name = want["name"]
        info = await jsapi.stream_info(nc, name)
        if info is None:
            await jsapi.request(nc, f"STREAM.CREATE.{name}", want)
            results.append(ApplyResult(name, "created"))
            continue
        changed, drift = diff(info.config, want)
        if changed:
            update = dict(info.config)
            update.update({k: v for k, (_, v) in changed.items()})
            await jsapi.request(nc, f"STREAM.UPDATE.{name}", update)
        action = "drift" if drift else "updated" if changed else "unchanged"
        results.append(ApplyResult(name, action, changed, drift))
    return results
