"""A JetStream key-value bucket of first-wins claims that expire one by one.

``claim(key, ttl_s)`` creates the key only if it does not exist (expected last subject
sequence 0), with a per-message TTL (``Nats-TTL``, nats-server >= 2.11): of any number of
concurrent claims of one key, from any number of processes, exactly one wins, and the key is
gone again ``ttl_s`` after it was stored (no tombstone is left). A claim refused because the
key exists *is* the answer the callers want (a replay).

The bucket is an ordinary KV bucket (stream ``KV_<bucket>``, subjects ``$KV.<bucket>.<key>``,
one revision per key), so ``nats kv ls/get`` read it. It differs from what ``nats kv add``
creates in two settings: per-message TTLs are allowed, and it holds at most ``max_keys`` live
keys with DiscardNew — a claim beyond that is refused as full, never by evicting someone
else's.

nats-server checks the expected sequence before the duplicate window, so a publish resent
after a lost acknowledgement meets its own first copy as "wrong last sequence". Every claim
therefore stores a token of its own, and a conflict whose stored message carries our token
is our claim.
"""

from __future__ import annotations

import base64
import math
import re
import secrets
from dataclasses import dataclass
from typing import Any

from streamproc.bus import jsapi
from streamproc.bus.publisher import (
    STREAM_STORE_FULL,
    NoStream,
    Publisher,
    PublishError,
    PublishTimeout,
    WrongExpectedSequence,
)

KEY_RE = re.compile(r"^[-/_=a-zA-Z0-9]+(\.[-/_=a-zA-Z0-9]+)*$")
_LAST = re.compile(r"wrong last sequence: (\d+)")
DUPLICATE_WINDOW_NS = 120 * 1_000_000_000
LOOKUP_BUDGET_S = 2.0
"""How long a look-up keeps asking through timeouts and "no responders" (an election)."""


class KeyTaken(Exception):
    """The key exists: someone (maybe another process) claimed it first and it has not
    expired."""


class BucketFull(Exception):
    """The bucket holds its maximum number of live keys; nothing was stored."""


class BucketUnavailable(Exception):
    """NATS did not answer (no stream, timeout): whether the claim was stored is unknown."""


@dataclass(frozen=True)
class Claim:
    key: str
    seq: int
    """The claim's message in the bucket's stream."""


def stream_name(bucket: str) -> str:
    return f"KV_{bucket}"


def definition(bucket: str, *, replicas: int, max_keys: int, description: str) -> dict[str, Any]:
    """The bucket's stream in the JetStream API's JSON form (``nats stream add --config``)."""
    return {
        "name": stream_name(bucket),
        "description": description,
        "subjects": [f"$KV.{bucket}.>"],
        "retention": "limits",
        "storage": "file",
        "num_replicas": replicas,
        "max_msgs": max_keys,
        "max_bytes": -1,
        "max_age": 0,
        "max_msgs_per_subject": 1,
        "max_msg_size": 1024,
        "discard": "new",
        "duplicate_window": DUPLICATE_WINDOW_NS,
        "allow_msg_ttl": True,
        "allow_rollup_hdrs": True,
        "allow_direct": True,
        "deny_delete": True,
        "deny_purge": False,
    }


class TtlBucket:
    """Claims in one bucket, published through the process's pipelined publisher."""

    def __init__(self, publisher: Publisher, bucket: str, *, holder: str = "") -> None:
        self.publisher = publisher
        self.bucket = bucket
        self.stream = stream_name(bucket)
        self.holder = holder
        """Stored with every claim (who claimed it, for ``nats kv get``), before the token."""

    async def claim(self, key: str, ttl_s: float) -> Claim:
        """Create ``key`` for ``ttl_s`` seconds (rounded up, at least 1); :class:`KeyTaken`
        if it exists, :class:`BucketFull`, or :class:`BucketUnavailable`."""
        if not KEY_RE.match(key):
            raise ValueError(f"invalid key {key!r}")
        token = secrets.token_hex(12)
        value = f"{self.holder} {token}".encode()
        subject = f"$KV.{self.bucket}.{key}"
        ttl = max(1, math.ceil(ttl_s))
        try:
            ack = await self.publisher.publish(
                subject, value, token, expected_last_subject_seq=0, ttl_s=ttl
            )
        except WrongExpectedSequence as exc:
            m = _LAST.search(exc.description)
            if m and await self._stored(int(m.group(1)), subject, value):
                return Claim(key, int(m.group(1)))  # our own first copy (a resent publish)
            raise KeyTaken(key) from None
        except PublishError as exc:
            if exc.err_code == STREAM_STORE_FULL:
                raise BucketFull(f"{self.bucket} holds its maximum of live keys") from None
            raise BucketUnavailable(str(exc)) from None
        except (PublishTimeout, NoStream, OSError) as exc:
            raise BucketUnavailable(str(exc) or type(exc).__name__) from None
        return Claim(key, ack.seq)

    async def _stored(self, seq: int, subject: str, value: bytes) -> bool:
        nc = self.publisher.nc
        try:
            doc = await jsapi.request(nc, f"STREAM.MSG.GET.{self.stream}", {"seq": seq})
        except jsapi.JsApiError:
            return False
        msg = doc.get("message") or {}
        return msg.get("subject") == subject and base64.b64decode(msg.get("data") or "") == value

    async def exists(self, key: str) -> bool:
        """Whether ``key`` is claimed now; :class:`BucketUnavailable` if NATS did not say
        (asked again through a leader election for up to :data:`LOOKUP_BUDGET_S`)."""
        subject = f"$KV.{self.bucket}.{key}"
        nc = self.publisher.nc
        api = f"STREAM.MSG.GET.{self.stream}"
        try:
            await jsapi.with_retries(
                lambda: jsapi.request(nc, api, {"last_by_subj": subject}, timeout=1.0),
                LOOKUP_BUDGET_S,
                pause_s=0.25,
            )
        except jsapi.JsApiError as exc:
            if exc.err_code == jsapi.NO_MESSAGE:
                return False
            raise BucketUnavailable(str(exc)) from None
        return True
