"""Rate buckets shared by every runner process: one GCRA state per bucket in JetStream KV.

The bucket ``<prefix>_rates`` (stream ``KV_<prefix>_rates``, a KV bucket's layout) holds
one key per leaky bucket — ``run.<tenant>.<run>``, ``tenant.<tenant>``, ``host.<registry>`` —
whose value is the bucket's theoretical arrival time (:mod:`streamproc.runner.gcra`).
A runner takes tokens with a compare-and-set: it writes the new TAT expecting the revision
it read (``Nats-Expected-Last-Subject-Sequence``); of two runners writing at once, one is
refused, learns the current revision from the refusal, reads that message and tries again.
A key nobody wrote for an hour is gone, which is the same as an idle bucket.

**One time base: the NATS server's clock.** A TAT is in the server's time (ns since the
epoch), never in a runner's: each runner estimates the server's time as its own monotonic
clock plus an offset measured from server timestamps — the ``ts`` of a ``STREAM.INFO``
answer (every 5 s, in the background) and the stored time of every message it reads. A
timestamp is at most the server's time when the answer arrived, so the estimate is never
ahead of the server by more than the clocks' drift between two samples: runners whose own
clocks disagree still share one bucket exactly, and a runner behind takes fewer tokens,
never more.
"""

from __future__ import annotations

import asyncio
import calendar
import logging
import re
import time
from dataclasses import dataclass
from typing import Any

import msgspec
from nats.errors import Error as NatsError

from streamproc import metrics
from streamproc.bus import jsapi, streams
from streamproc.bus.publisher import (
    NoStream,
    Publisher,
    PublishError,
    PublishTimeout,
    WrongExpectedSequence,
)
from streamproc.names import rate_bucket

log = logging.getLogger(__name__)

MAX_AGE_S = 3600
"""A key expires this long after its last write: far beyond any TAT's lead over its write
(at most the burst plus one interval; ``STREAMPROC_PLANNER_BURST_S`` is capped below it)."""
SYNC_EVERY_NS = 5 * 1_000_000_000
"""How often the offset to the server's clock is measured again."""
CALL_TIMEOUT_S = 1.0
"""A read or write not answered within this is given up (the callers wait and it is asked
again): a write still buffered while the connection is down may land later, which only
spends tokens nobody uses."""
_LAST = re.compile(r"wrong last sequence: (\d+)")
_CALLS = {
    o: metrics.loop_counter(metrics.RATE_BUCKET_CALLS.labels(o))
    for o in ("granted", "conflict", "read", "clock", "error")
}
_SAFE = re.compile(r"[^A-Za-z0-9_-]")


class Unavailable(Exception):
    """NATS did not answer, or refused the bucket: no token can be taken now."""


class Conflict(Exception):
    """Another runner wrote the key first: ``current`` is its entry now (None: the key is
    gone, or moved on again before it could be read)."""

    def __init__(self, current: Entry | None) -> None:
        super().__init__(f"rate bucket moved to {current}")
        self.current = current


class State(msgspec.Struct, kw_only=True):
    tat: int
    """Theoretical arrival time, ns since the epoch in the NATS server's clock."""
    by: str = ""
    """The write's own token: a resent write that met its first copy recognises it."""


@dataclass(frozen=True)
class Entry:
    revision: int
    state: State


_state = msgspec.json.Decoder(State)


def key_token(text: str) -> str:
    """``text`` as one key token: characters outside ``[A-Za-z0-9_-]`` as ``=XX``."""
    return _SAFE.sub(lambda m: "".join(f"={b:02X}" for b in m.group().encode()), text)


def key_of(kind: str, *parts: str) -> str:
    return ".".join([kind, *(key_token(p) for p in parts)])


def definition(prefix: str, replicas: int) -> dict[str, Any]:
    """The bucket's stream in the JetStream API's JSON form (``nats stream add --config``)."""
    name = rate_bucket(prefix)
    return {
        "name": f"KV_{name}",
        "description": "streamproc runners: leaky buckets (GCRA) per run, tenant, registry host",
        "subjects": [f"$KV.{name}.>"],
        "retention": "limits",
        "storage": "file",
        "num_replicas": replicas,
        "max_msgs": -1,
        "max_bytes": -1,
        "max_age": MAX_AGE_S * 1_000_000_000,
        "max_msgs_per_subject": 1,
        "max_msg_size": 1024,
        "discard": "old",
        "duplicate_window": 2 * 1_000_000_000,
        "allow_rollup_hdrs": True,
        "allow_direct": True,
        "deny_delete": True,
        "deny_purge": False,
    }


def rfc3339_ns(text: str) -> int:
    """``2026-01-02T03:04:05.123456789Z`` (what NATS stamps) as ns since the epoch."""
    text = text.strip()
    if text.endswith("Z"):
        text, offset = text[:-1], 0
    else:  # an explicit offset, e.g. +02:00
        sign = 1 if text[-6] == "+" else -1
        offset = sign * (int(text[-5:-3]) * 3600 + int(text[-2:]) * 60)
        text = text[:-6]
    whole, _, frac = text.partition(".")
    seconds = calendar.timegm(time.strptime(whole, "%Y-%m-%dT%H:%M:%S")) - offset
    return seconds * 1_000_000_000 + int((frac + "000000000")[:9] or 0)


class ServerClock:
    """The NATS server's time as this process's monotonic clock plus a measured offset.

    Every sample ``(server time stamped on an answer, local time the answer arrived)`` bounds
    the offset from below; the estimate is the highest bound of the last two sync periods,
    so a correction of the server's clock is followed within two periods."""

    def __init__(self) -> None:
        self._offset: int | None = None
        self._current = self._previous = -(2**62)
        self._period_start = 0
        self.synced_at = -(2**62)

    def observe(self, server_ns: int, local_ns: int, *, tight: bool = False) -> None:
        if local_ns - self._period_start >= SYNC_EVERY_NS:
            self._previous, self._current = self._current, -(2**62)
            self._period_start = local_ns
        self._current = max(self._current, server_ns - local_ns)
        self._offset = max(self._current, self._previous)
        if tight:
            self.synced_at = local_ns

    def stale(self, local_ns: int, periods: int = 1) -> bool:
        """No measurement within ``periods`` sync periods (or none at all)."""
        return self._offset is None or local_ns - self.synced_at >= periods * SYNC_EVERY_NS

    def at(self, local_ns: int) -> int:
        """The server's time at local monotonic ``local_ns`` (needs one sample)."""
        if self._offset is None:
            raise Unavailable("the NATS server's time is not known yet")
        return local_ns + self._offset


class RateStore:
    """Reads and compare-and-set writes of the bucket, and the server clock."""

    def __init__(self, publisher: Publisher, prefix: str, writer: str) -> None:
        self.publisher = publisher
        self.nc = publisher.nc
        self.prefix = prefix
        self.bucket = rate_bucket(prefix)
        self.stream = f"KV_{self.bucket}"
        self.writer = writer
        self.clock = ServerClock()
        self._api = f"{jsapi.API}.DIRECT.GET.{self.stream}"
        self._serial = 0

    async def open(self, replicas: int) -> None:
        """Create the bucket if missing (replicated like the event stream)."""
        for result in await streams.apply(self.nc, [definition(self.prefix, replicas)]):
            if result.action == "drift":
                log.warning("rate bucket %s drift: %s", result.stream, result.describe())

    def subject(self, key: str) -> str:
        return f"$KV.{self.bucket}.{key}"

    async def sync_clock(self) -> None:
        """Measure the offset to the server's clock (``ts`` of a ``STREAM.INFO`` answer)."""
        _CALLS["clock"]()
        try:
            msg = await self.nc.request(
                f"{jsapi.API}.STREAM.INFO.{self.stream}", b"", timeout=CALL_TIMEOUT_S
            )
        except (NatsError, TimeoutError, OSError) as exc:
            raise Unavailable(f"{self.stream}: {exc or type(exc).__name__}") from None
        arrived = time.monotonic_ns()
        try:
            doc = msgspec.json.decode(msg.data)
        except msgspec.DecodeError:
            doc = None
        ts = doc.get("ts") if isinstance(doc, dict) else None
        if not ts:
            detail = doc.get("error") if isinstance(doc, dict) else doc
            raise Unavailable(f"{self.stream}: no server time in STREAM.INFO ({detail})")
        self.clock.observe(rfc3339_ns(ts), arrived, tight=True)

    async def read(self, key: str, revision: int | None = None) -> Entry | None:
        """The key's last entry (or the entry at ``revision``); None when it has none."""
        body = {"seq": revision} if revision else {"last_by_subj": self.subject(key)}
        _CALLS["read"]()
        try:
            msg = await self.nc.request(
                self._api, msgspec.json.encode(body), timeout=CALL_TIMEOUT_S
            )
        except (NatsError, TimeoutError, OSError) as exc:
            raise Unavailable(f"{self.stream}: {exc or type(exc).__name__}") from None
        arrived = time.monotonic_ns()
        headers = msg.headers or {}
        status = headers.get("Status", "")
        if status == "404":
            return None
        if status:
            raise Unavailable(f"{self.stream}: direct get answered {status}")
        stamped = headers.get("Nats-Time-Stamp")
        if stamped:
            self.clock.observe(rfc3339_ns(stamped), arrived)
        if revision and headers.get("Nats-Subject") != self.subject(key):
            return None  # the key moved on (or expired) since that revision
        try:
            state = _state.decode(msg.data)
        except msgspec.DecodeError:
            state = State(tat=0)  # unreadable: idle, and the next write replaces it
        return Entry(int(headers.get("Nats-Sequence", "0") or 0), state)

    async def write(self, key: str, tat: int, last: int) -> int:
        """Store ``tat`` if the key is still at revision ``last`` (0: absent); the new
        revision, :class:`Conflict` or :class:`Unavailable`."""
        self._serial += 1
        token = f"{self.writer}-{self._serial:x}"
        data = msgspec.json.encode(State(tat=tat, by=token))
        try:
            async with asyncio.timeout(CALL_TIMEOUT_S):
                ack = await self.publisher.publish(
                    self.subject(key), data, token, expected_last_subject_seq=last
                )
        except WrongExpectedSequence as exc:
            m = _LAST.search(exc.description)
            if m is None:
                raise Unavailable(str(exc)) from None
            revision = int(m.group(1))
            current = await self.read(key, revision) if revision else None
            if current is not None and current.state.by == token:
                _CALLS["granted"]()
                return revision  # our own write, resent after a lost acknowledgement
            _CALLS["conflict"]()
            raise Conflict(current) from None
        except (PublishError, PublishTimeout, NoStream, NatsError, OSError, TimeoutError) as exc:
            _CALLS["error"]()
            raise Unavailable(str(exc) or type(exc).__name__) from None
        _CALLS["granted"]()
        return ack.seq
