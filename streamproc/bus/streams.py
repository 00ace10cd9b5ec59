"""The three streams of the design, as code and as operator JSON, applied idempotently.

``apply`` creates what is missing, updates what JetStream lets us change (retention between
limits and interest included: the Notify stream of an older version switches in place, its
window consumer added first), and reports as drift what it cannot (to or from a work queue,
storage, turning deny flags off) instead of failing silently.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from nats.aio.client import Client

from streamproc.bus import jsapi, objects
from streamproc.bus.topology import cluster_size
from streamproc.config import ConfigError, Configuration
from streamproc.configfile.registry import env_name
from streamproc.configfile.sections import Sections
from streamproc.names import (
    DEFAULT_PREFIX,
    EVENTS,
    NOTIFY,
    NOTIFY_WINDOW,
    WORK,
    all_of,
    sbom_bucket,
    stream_names,
)

NS = 1_000_000_000
HOUR = 3600 * NS
IMMUTABLE = ("name", "retention", "storage")
RETENTION_IN_PLACE = frozenset({"limits", "interest"})
"""Retention JetStream changes in place between these two (never to or from workqueue)."""
ONE_WAY = ("deny_delete", "deny_purge")
"""Flags that can be switched on after creation but never off."""


DAY = 24 * HOUR
MAX_MSG_SIZE = 8 * 1024 * 1024
EVENTS_MAX_AGE_ENV = env_name("streams.events_max_age_days")
EVENTS_MAX_BYTES_ENV = env_name("streams.events_max_bytes")


@dataclass(frozen=True)
class EventsRetention:
    """Limits of the event log; 0 keeps everything (the default: any state can be rebuilt).

    With a byte limit the stream discards its *oldest* events when full (DiscardOld):
    DiscardNew would refuse every publish once the limit is reached, stopping the system.
    Without one it stays DiscardNew, so a full disk refuses new events rather than losing
    history. Age limits remove old events whatever the discard policy."""

    max_age_days: int = 0
    max_bytes: int = 0

    def config(self) -> dict[str, Any]:
        return {
            "max_age": self.max_age_days * DAY,
            "max_bytes": self.max_bytes or -1,
            "discard": "old" if self.max_bytes else "new",
        }


def events_retention_from(sections: Sections) -> EventsRetention:
    """The event log's limits from the typed ``[streams]`` section (0: no limit); a byte
    limit below the largest event is refused here."""
    s = sections.streams
    values = []
    for var, value, low, high, want in (
        (EVENTS_MAX_AGE_ENV, s.events_max_age_days, 1, 100 * 366,
         "a whole number of days up to 36600"),
        (EVENTS_MAX_BYTES_ENV, s.events_max_bytes, MAX_MSG_SIZE, 2**63 - 1,
         "a whole number of bytes >= 8388608"),
    ):  # fmt: skip
        if not (value == 0 or low <= value <= high):
            raise ConfigError(f"{var}='{value}': 0 (no limit) or {want}")
        values.append(value)
    return EventsRetention(*values)


def configured_events_retention(env: Mapping[str, str]) -> EventsRetention:
    """``STREAMPROC_EVENTS_MAX_AGE_DAYS`` and ``STREAMPROC_EVENTS_MAX_BYTES`` from their text,
    decoded as at start (``config check`` and tests)."""
    return events_retention_from(Configuration(values=env).sections)


NOTIFY_MAX_AGE_ENV = env_name("notify.max_age_s")
NOTIFY_MAX_RETENTION_ENV = env_name("notify.max_retention_s")
MIN_NOTIFY_AGE_S = 10


@dataclass(frozen=True)
class NotifyRetention:
    """How long the Notify stream keeps a message.

    ``max_age_s`` is the delivery window everyone gets: the window consumer
    (:data:`~streamproc.names.NOTIFY_WINDOW`) holds each message that long. A registered HTTP
    feed consumer holds its own tenant and kind's messages beyond it until it reports them,
    at most ``max_retention_s`` — the stream's ``max_age``: the stream has interest retention,
    so a message goes once no consumer holds it any more."""

    max_age_s: int = 86_400
    max_retention_s: int = 7 * 86_400

    def __post_init__(self) -> None:
        if self.max_age_s < MIN_NOTIFY_AGE_S:
            raise ConfigError(
                f"{NOTIFY_MAX_AGE_ENV}={self.max_age_s}: at least {MIN_NOTIFY_AGE_S} seconds"
            )
        if self.max_retention_s < self.max_age_s:
            raise ConfigError(
                f"{NOTIFY_MAX_RETENTION_ENV}={self.max_retention_s}: at least the delivery "
                f"window, {NOTIFY_MAX_AGE_ENV}"
            )


def notify_retention_from(sections: Sections) -> NotifyRetention:
    """The Notify stream's retention from the typed ``[notify]`` section."""
    return NotifyRetention(sections.notify.max_age_s, sections.notify.max_retention_s)


def configured_notify_retention(env: Mapping[str, str]) -> NotifyRetention:
    """``STREAMPROC_NOTIFY_MAX_AGE_S`` and ``STREAMPROC_NOTIFY_MAX_RETENTION_S`` from their
    text, decoded as at start (``config check`` and tests)."""
    return notify_retention_from(Configuration(values=env).sections)


def window_consumer() -> dict[str, Any]:
    """The Notify stream's delivery window (a durable consumer nobody pulls from: the
    gateways move it along, :mod:`streamproc.notify.retention`)."""
    return {
        "durable_name": NOTIFY_WINDOW,
        "description": "Holds every Notify message for notify.max_age_s (the delivery window)",
        "ack_policy": "explicit",
        "deliver_policy": "all",
    }


def definitions(
    prefix: str = DEFAULT_PREFIX,
    replicas: int = 1,
    events_retention: EventsRetention | None = None,
    notify_retention: NotifyRetention | None = None,
) -> list[dict[str, Any]]:
    """Stream configs in the JetStream API's JSON form (durations in nanoseconds): the three
    streams and the SBOM store's bucket (an object store is a stream too, replicated alike)."""
    events, work, notify = stream_names(prefix)
    limits = (events_retention or EventsRetention()).config()
    held = (notify_retention or NotifyRetention()).max_retention_s * NS
    return [
        {
            "name": events,
            "description": "The event log: schedules, exports, images, runs, verdicts, audit",
            "subjects": [all_of(prefix, EVENTS)],
            "retention": "limits",
            "storage": "file",
            "num_replicas": replicas,
            "max_msgs": -1,
            "max_bytes": limits["max_bytes"],
            "max_age": limits["max_age"],
            "max_msgs_per_subject": -1,
            "max_msg_size": MAX_MSG_SIZE,
            "discard": limits["discard"],
            "duplicate_window": HOUR,
            "deny_delete": True,
            "deny_purge": False,
            "allow_rollup_hdrs": False,
            "allow_direct": True,
        },
        {
            "name": work,
            "description": "Run segments handed to runners (work queue)",
            "subjects": [all_of(prefix, WORK)],
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
            "allow_direct": True,
        },
        {
            "name": notify,
            "description": "What Notify consumes: rescan.delta, report.ready, run.summary",
            "subjects": [all_of(prefix, NOTIFY)],
            "retention": "interest",
            "storage": "file",
            "num_replicas": replicas,
            "max_msgs": -1,
            "max_bytes": -1,
            "max_age": held,
            "max_msg_size": 8 * 1024 * 1024,
            "discard": "old",
            "duplicate_window": min(HOUR, held),
            "deny_delete": False,
            "deny_purge": False,
            "allow_direct": True,
        },
        objects.definition(
            sbom_bucket(prefix),
            replicas,
            "Every indexed SBOM as it was sent, by sha256 (a JetStream object store)",
        ),
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
        in_place = k == "retention" and {current, v} <= RETENTION_IN_PLACE
        if (k in IMMUTABLE and not in_place) or (k in ONE_WAY and current and not v):
            drift[k] = (current, v)
        else:
            changed[k] = (current, v)
    return changed, drift


REPLICAS_ENV = env_name("streams.replicas")
AUTO = 0


def replicas_from(sections: Sections) -> int:
    """``streams.replicas`` (``STREAMPROC_STREAM_REPLICAS``): 0 = auto, else 1..5 (bounds
    checked at start)."""
    return sections.streams.replicas


def configured_replicas(env: Mapping[str, str]) -> int:
    """:func:`replicas_from` the text of ``env``, decoded as at start (tests)."""
    return replicas_from(Configuration(values=env).sections)


async def detected_replicas(nc: Client, wait: float = 2.0) -> int:
    """3 when the connected server's cluster has at least 3 servers, else 1.

    Routes of a just-started cluster may still be forming, so a clustered server that
    shows fewer than 3 peers is given ``wait`` seconds to announce the others.
    """
    deadline = asyncio.get_running_loop().time() + wait
    while True:
        n = cluster_size(nc)
        if n >= 3:
            return 3
        info: dict[str, Any] = getattr(nc, "_server_info", None) or {}
        if not info.get("cluster") or asyncio.get_running_loop().time() >= deadline:
            return 1
        await asyncio.sleep(0.1)


APPLY_RETRY_S = 20.0
"""How long creating or updating a stream keeps asking through a timeout or no responder."""


async def _request_retried(nc: Client, subject: str, body: dict[str, Any]) -> None:
    await jsapi.with_retries(lambda: jsapi.request(nc, subject, body), APPLY_RETRY_S)


async def _ensure_window(nc: Client, stream: str) -> None:
    """The window consumer of an interest stream (``CONSUMER.CREATE`` of an existing one
    with the same config changes nothing)."""
    config = window_consumer()
    await jsapi.with_retries(partial(jsapi.create_consumer, nc, stream, config), APPLY_RETRY_S)


async def apply(nc: Client, configs: list[dict[str, Any]]) -> list[ApplyResult]:
    """Create or update each stream. ``num_replicas`` 0 means auto: a new stream gets
    :func:`detected_replicas`; an existing one keeps its count or grows to it, never
    shrinks (a node that is down while a role starts must not demote the log to R1)."""
    results = []
    detected: int | None = None
    for want in configs:
        name = want["name"]
        # Processes starting with a cluster (or right after a node) can meet an election.
        info = await jsapi.with_retries(partial(jsapi.stream_info, nc, name), APPLY_RETRY_S)
        if want.get("num_replicas") == AUTO:
            if detected is None:
                detected = await detected_replicas(nc)
            have = int(info.config.get("num_replicas") or 1) if info is not None else 0
            want = {**want, "num_replicas": max(have, detected)}
        interest = want.get("retention") == "interest"
        if info is None:
            # An interest stream drops what no consumer holds: it is made as limits, its
            # window consumer added, and only then switched, so no publish meets it bare.
            first = {**want, "retention": "limits"} if interest else want
            try:
                await _request_retried(nc, f"STREAM.CREATE.{name}", first)
            except jsapi.JsApiError as exc:
                if exc.err_code != jsapi.STREAM_NAME_IN_USE:
                    raise
                # Another process made it meanwhile (and may have switched it already):
                # update it like any stream that exists.
                info = await jsapi.with_retries(partial(jsapi.stream_info, nc, name), APPLY_RETRY_S)
                if info is None:
                    raise
            else:
                if interest:
                    await _ensure_window(nc, name)
                    await _request_retried(nc, f"STREAM.UPDATE.{name}", want)
                results.append(ApplyResult(name, "created"))
                continue
        changed, drift = diff(info.config, want)
        if interest and "retention" not in drift:
            await _ensure_window(nc, name)  # before the switch, and back if it was deleted
        if changed:
            update = dict(info.config)
            update.update({k: v for k, (_, v) in changed.items()})
            await _request_retried(nc, f"STREAM.UPDATE.{name}", update)
        action = "drift" if drift else "updated" if changed else "unchanged"
        results.append(ApplyResult(name, action, changed, drift))
    return results
