"""The heartbeat record of one role instance, its settings, and the KV bucket it lives in."""

from __future__ import annotations

from collections.abc import Mapping

import msgspec
from nats.js.errors import BucketNotFoundError
from nats.js.kv import KeyValue

from streamproc.bus import jsapi
from streamproc.bus.fastclient import FastClient
from streamproc.config import ConfigError, Settings
from streamproc.configfile.registry import env_name
from streamproc.configfile.sections import Sections
from streamproc.names import status_bucket

bucket_name = status_bucket

INTERVAL_ENV = env_name("status.interval_s")
DEFAULT_INTERVAL_S = 2.0
STALE_INTERVALS = 3
"""A heartbeat older than this many of its writer's intervals (plus :data:`SKEW_MARGIN_S`,
for clocks of different hosts) is stale."""
SKEW_MARGIN_S = 1.0
KEEP_INTERVALS = 15
"""The bucket's ``max_age``, in heartbeat intervals: how long a dead instance stays listed."""


def interval_s(env: Mapping[str, str]) -> float:
    """``STREAMPROC_STATUS_INTERVAL_S`` (``status.interval_s``), validated."""
    raw = env.get(INTERVAL_ENV) or str(DEFAULT_INTERVAL_S)
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0.1 <= value <= 300:
        raise ConfigError(f"{INTERVAL_ENV}={raw!r}: seconds between 0.1 and 300")
    return value


def interval_from(sections: Sections) -> float:
    """:func:`interval_s` from the typed ``[status]`` section (bounds checked at start)."""
    return sections.status.interval_s


class Heartbeat(msgspec.Struct, kw_only=True):
    """One role instance, as it last reported itself."""

    role: str
    node: str
    pid: int
    http_url: str = ""
    stream: str = ""
    applied: int = 0
    head: int = 0
    lag: int = 0
    lag_limit: int = 0
    """Above this lag the instance reports itself not ready (``/readyz``): lagging."""
    failure: str | None = None
    lease: str | None = None
    """``active``, ``catching-up`` or ``standby`` for a role behind a lease (planner,
    auditor); None where every instance acts."""
    problems: list[str] = []
    """What its reactors report wrong while it runs (e.g. a failing restart check): the
    instance is ``degraded`` and answers ``/readyz`` with 503."""
    notes: list[str] = []
    """What its reactors say about how it runs (a role with nothing to do): shown, never a
    problem."""
    rejections: dict[str, dict[str, int]] = {}
    """Per projection and reason, the events its state records as rejected (an update of
    an unknown run, segment, schedule or image …): not a health problem, but worth a look."""
    started: str = ""
    updated_ms: int = 0
    interval_s: float = DEFAULT_INTERVAL_S

    @property
    def key(self) -> str:
        return f"{self.role}.{self.node}.{self.pid}"

    @property
    def instance(self) -> str:
        return f"{self.node}/{self.pid}"


encode = msgspec.json.Encoder().encode
decode = msgspec.json.Decoder(Heartbeat).decode


async def open_bucket(nc: FastClient, settings: Settings, interval: float) -> KeyValue:
    """Bind the status bucket, creating it (replicated like the event stream) or growing its
    ``max_age`` as needed."""
    js = nc.jetstream()
    name = bucket_name(settings.prefix)
    keep_s = KEEP_INTERVALS * interval
    try:
        kv = await js.key_value(name)
    except BucketNotFoundError:
        replicas = await jsapi.stream_replicas(nc, settings.events_stream)
        try:
            return await js.create_key_value(
                bucket=name,
                history=1,
                ttl=keep_s,
                replicas=replicas,
                description="streamproc role heartbeats (streamproc status)",
            )
        except Exception:  # another instance created it first, perhaps with another ttl
            kv = await js.key_value(name)
    stream = f"KV_{name}"
    info = await jsapi.stream_info(nc, stream)
    if info is not None and 0 < info.config.get("max_age", 0) < keep_s * 1e9:
        # A bucket made by faster heartbeats would drop ours between beats: only ever grow.
        config = {**info.config, "max_age": int(keep_s * 1e9)}
        await jsapi.request(nc, f"STREAM.UPDATE.{stream}", config)
    return kv
