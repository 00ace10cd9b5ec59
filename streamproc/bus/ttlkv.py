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

``exists(key)`` is a look-up, not a claim: every look-up asked within one turn of the event
loop goes out as one batched direct get (``multi_last``, answered by any replica of the
bucket's stream), so a busy gateway pays one request for many. A replica may lag the leader
by a moment; a look-up is therefore only ever an early answer, and the claim that follows
decides.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import math
import os
import re
import time
from dataclasses import dataclass
from typing import Any

import msgspec

from streamproc.bus import jsapi
from streamproc.bus.fastclient import description_of, status_of
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
LOOKUP_TIMEOUT_S = 1.0
LOOKUP_BATCH = 256
"""Most keys one direct get asks about."""
_SUBJECT_HEADER = b"\r\nNats-Subject: "
_BOOT = os.urandom(6).hex()
_serial = itertools.count(1)


def new_token() -> str:
    """Unique per claim attempt (a random prefix per process and a counter): what tells our
    own stored claim from another holder's."""
    return f"{_BOOT}{next(_serial):x}"


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


@dataclass(frozen=True)
class _Problem:
    text: str
    transient: bool = True
    """A timeout or "no responders" (an election): worth asking again."""


class _Asked:
    """One batched look-up in flight: the keys found so far, and its end (None: the whole
    answer is in)."""

    __slots__ = ("done", "found")

    def __init__(self, done: asyncio.Future[_Problem | None]) -> None:
        self.done = done
        self.found: set[bytes] = set()


class TtlBucket:
    """Claims in one bucket, published through the process's pipelined publisher."""

    def __init__(self, publisher: Publisher, bucket: str, *, holder: str = "") -> None:
        self.publisher = publisher
        self.bucket = bucket
        self.stream = stream_name(bucket)
        self.holder = holder
        """Stored with every claim (who claimed it, for ``nats kv get``), before the token."""
        self._api = f"$JS.API.DIRECT.GET.{self.stream}"
        self._inbox = ""
        self._opening: asyncio.Lock | None = None
        self._waiting: dict[bytes, list[asyncio.Future[bool]]] | None = None
        self._asked: dict[bytes, _Asked] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    async def claim(self, key: str, ttl_s: float) -> Claim:
        """Create ``key`` for ``ttl_s`` seconds (rounded up, at least 1); :class:`KeyTaken`
        if it exists, :class:`BucketFull`, or :class:`BucketUnavailable`."""
        if not KEY_RE.match(key):
            raise ValueError(f"invalid key {key!r}")
        token = new_token()
        value = f"{self.holder} {token}".encode()
        subject = f"$KV.{self.bucket}.{key}"
        ttl = max(1, math.ceil(ttl_s))
        try:
            # No Nats-Msg-Id: the expected sequence makes the claim unique (and is checked
            # first), so an id would only hold an entry per claim in the duplicate window.
            ack = await self.publisher.publish(
                subject, value, None, expected_last_subject_seq=0, ttl_s=ttl
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
        if not self._inbox:
            await self._open_lookups()
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[bool] = loop.create_future()
        batch = self._waiting
        if batch is None or len(batch) >= LOOKUP_BATCH:
            batch = self._waiting = {}
            task = loop.create_task(self._look_up(batch))  # after this turn's other callers
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        batch.setdefault(f"$KV.{self.bucket}.{key}".encode(), []).append(fut)
        return await fut

    async def _open_lookups(self) -> None:
        if self._opening is None:
            self._opening = asyncio.Lock()
        async with self._opening:
            if not self._inbox:
                nc = self.publisher.nc
                inbox = nc.new_inbox()
                await nc.subscribe_raw(inbox + ".*", self._on_answer)
                self._inbox = inbox

    async def _look_up(self, batch: dict[bytes, list[asyncio.Future[bool]]]) -> None:
        """Ask about every key of ``batch`` in one direct get (again through an election)
        and settle each caller's future."""
        if self._waiting is batch:
            self._waiting = None
        body = msgspec.json.encode({"multi_last": [s.decode() for s in batch], "batch": len(batch)})
        give_up = time.monotonic() + LOOKUP_BUDGET_S
        while True:
            answer = await self._ask(body)
            if isinstance(answer, _Asked):
                for subject, waiters in batch.items():
                    found = subject in answer.found
                    for f in waiters:
                        if not f.done():
                            f.set_result(found)
                return
            if not answer.transient or time.monotonic() + 0.25 > give_up:
                break
            await asyncio.sleep(0.25)
        error = BucketUnavailable(answer.text)
        for waiters in batch.values():
            for f in waiters:
                if not f.done():
                    f.set_exception(error)

    async def _ask(self, body: bytes) -> _Asked | _Problem:
        """One direct get: the answer, or why there was none."""
        token = f"{next(_serial):x}".encode()
        asked = self._asked[token] = _Asked(asyncio.get_running_loop().create_future())
        try:
            reply = f"{self._inbox}.{token.decode()}"
            await self.publisher.nc.publish(self._api, body, reply=reply)
            async with asyncio.timeout(LOOKUP_TIMEOUT_S):
                problem = await asked.done
        except TimeoutError:
            problem = _Problem(f"no answer from {self.stream} within {LOOKUP_TIMEOUT_S} s")
        except Exception as exc:  # the connection is closed or closing
            problem = _Problem(str(exc) or type(exc).__name__, transient=False)
        finally:
            del self._asked[token]
        return asked if problem is None else problem

    def _on_answer(self, subject: bytes, _reply: bytes, _data: bytes, headers: bytes) -> None:
        asked = self._asked.get(subject[len(self._inbox) + 1 :])
        if asked is None or asked.done.done():
            return
        status = status_of(headers)
        if not status:  # a stored claim: its subject is in the headers
            i = headers.find(_SUBJECT_HEADER)
            if i >= 0:
                i += len(_SUBJECT_HEADER)
                asked.found.add(headers[i : headers.find(b"\r\n", i)])
        elif status in (b"204", b"404"):  # the end of the batch; 404: none of the keys exist
            asked.done.set_result(None)
        elif status in (b"503", b"408"):  # no responders: no stream, or between leaders
            asked.done.set_result(_Problem(f"{self.stream} unavailable ({status.decode()})"))
        else:
            text = f"direct get on {self.stream}: {status.decode()} {description_of(headers)}"
            asked.done.set_result(_Problem(text, transient=False))
