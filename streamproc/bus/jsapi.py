"""The few JetStream API calls streamproc makes itself, decoded with msgspec.

Raw API requests keep exact values the client library rounds or drops (a stream's
``created`` time to the nanosecond is the epoch of every checkpoint) and let the stream
definitions below be the very JSON an operator can apply with the ``nats`` CLI.
"""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import msgspec
from nats.aio.client import Client
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeout

from streamproc.cancellation import checkpoint

T = TypeVar("T")
API = "$JS.API"
STREAM_NOT_FOUND = 10059
CONSUMER_NOT_FOUND = 10014
STREAM_NAME_IN_USE = 10058
NO_SUITABLE_PEERS = 10005
"""No peers to place a stream on; with ``peer offline`` in its description, a peer the
metadata group has not yet seen come up (a cluster still forming): transient."""
"""``STREAM.CREATE`` of a name that exists with another configuration."""
NO_MESSAGE = 10037
"""``STREAM.MSG.GET`` of a sequence the stream does not hold."""


TRANSIENT = (408, 503)
"""Codes of a request that timed out or found no responder (``err_code`` 0): a leader
election, a server restarting — worth asking again."""


class JsApiError(RuntimeError):
    def __init__(self, code: int, err_code: int, description: str) -> None:
        self.code = code
        self.err_code = err_code
        self.description = description
        super().__init__(f"JetStream API error {code}/{err_code}: {description}")


class _Err(msgspec.Struct):
    code: int = 0
    err_code: int = 0
    description: str = ""


class StreamState(msgspec.Struct):
    messages: int = 0
    bytes: int = 0
    first_seq: int = 0
    last_seq: int = 0
    consumer_count: int = 0
    first_ts: str = ""
    """Time of the first message held (``0001-01-01T00:00:00Z`` when none)."""
    last_ts: str = ""
    """Time of the last message stored, held or not."""
    num_deleted: int = 0
    """Messages removed between the first and the last (not from the head)."""
    deleted: list[int] | None = None
    """Their sequences, when asked for (``deleted_details``)."""


class SequenceInfo(msgspec.Struct):
    consumer_seq: int = 0
    stream_seq: int = 0


class ConsumerInfo(msgspec.Struct):
    """What a consumer reports of itself: its last delivery (``delivered``) and the messages
    of its filter it has not delivered yet (``num_pending``)."""

    delivered: SequenceInfo = msgspec.field(default_factory=SequenceInfo)
    num_pending: int = 0
    num_ack_pending: int = 0


class StreamPeer(msgspec.Struct):
    name: str = ""
    current: bool = False
    offline: bool = False


class StreamCluster(msgspec.Struct):
    leader: str = ""
    replicas: list[StreamPeer] = msgspec.field(default_factory=list)


class StreamInfo(msgspec.Struct):
    config: dict[str, Any]
    state: StreamState
    created: str
    cluster: StreamCluster | None = None

    @property
    def leaderless(self) -> bool:
        """A replicated stream without a leader (no quorum, or an election): its info is
        answered by a follower, but nothing can be stored."""
        return self.cluster is not None and bool(self.cluster.replicas) and not self.cluster.leader


async def request(
    nc: Client, subject: str, body: Any = None, timeout: float = 5.0
) -> dict[str, Any]:
    data = b"" if body is None else msgspec.json.encode(body)
    try:
        msg = await nc.request(f"{API}.{subject}", data, timeout=timeout)
    except NoRespondersError:
        raise JsApiError(503, 0, "JetStream not available (no responders)") from None
    except NatsTimeout:
        raise JsApiError(408, 0, f"JetStream API {subject} timed out after {timeout} s") from None
    doc = msgspec.json.decode(msg.data)
    if isinstance(doc, dict) and doc.get("error"):
        e = msgspec.convert(doc["error"], _Err)
        raise JsApiError(e.code, e.err_code, e.description)
    return doc  # type: ignore[no-any-return]  # a JetStream API answer is a JSON object (checked above)


async def last_on_subject(nc: Client, stream: str, subject: str) -> tuple[int, bytes | None]:
    """Sequence and data of the subject's last message (0, None when there is none)."""
    try:
        doc = await request(nc, f"STREAM.MSG.GET.{stream}", {"last_by_subj": subject})
    except JsApiError as exc:
        if exc.err_code == NO_MESSAGE:
            return 0, None
        raise
    msg = doc["message"]
    return int(msg["seq"]), base64.b64decode(msg.get("data") or "")


async def next_on_subject(nc: Client, stream: str, seq: int, subject: str) -> int | None:
    """Sequence of the first message at or after ``seq`` on ``subject`` (wildcards allowed),
    as the stream stores it; None when there is none. Asked of the stream itself: a
    consumer's pending count can lag a message the stream just stored."""
    try:
        doc = await request(nc, f"STREAM.MSG.GET.{stream}", {"seq": seq, "next_by_subj": subject})
    except JsApiError as exc:
        if exc.err_code == NO_MESSAGE:
            return None
        raise
    return int(doc["message"]["seq"])


async def stream_info(nc: Client, stream: str, *, deleted: bool = False) -> StreamInfo | None:
    """``deleted``: with the sequences of the messages removed between first and last."""
    try:
        doc = await request(
            nc, f"STREAM.INFO.{stream}", {"deleted_details": True} if deleted else None
        )
    except JsApiError as exc:
        if exc.err_code == STREAM_NOT_FOUND:
            return None
        raise
    return msgspec.convert(doc, StreamInfo)


async def stream_replicas(nc: Client, stream: str) -> int:
    """The stream's replica count (1 when it does not exist): what buckets that belong
    with it (leases, status heartbeats) are created with. Asks again through an election."""
    info = await with_retries(lambda: stream_info(nc, stream), 20.0)
    return int(info.config.get("num_replicas") or 1) if info is not None else 1


async def consumer_info(nc: Client, stream: str, consumer: str) -> ConsumerInfo | None:
    try:
        doc = await request(nc, f"CONSUMER.INFO.{stream}.{consumer}")
    except JsApiError as exc:
        if exc.err_code == CONSUMER_NOT_FOUND:
            return None
        raise
    return msgspec.convert(doc, ConsumerInfo)


async def delete_consumer(nc: Client, stream: str, consumer: str) -> None:
    try:
        await request(nc, f"CONSUMER.DELETE.{stream}.{consumer}")
    except JsApiError as exc:
        if exc.err_code != CONSUMER_NOT_FOUND:
            raise


async def create_consumer(nc: Client, stream: str, config: dict[str, Any]) -> dict[str, Any]:
    name = config.get("durable_name") or config.get("name")
    subject = f"CONSUMER.CREATE.{stream}.{name}" if name else f"CONSUMER.CREATE.{stream}"
    return await request(nc, subject, {"stream_name": stream, "config": config})


def _transient(exc: JsApiError) -> bool:
    if exc.err_code == NO_SUITABLE_PEERS:
        return "peer offline" in exc.description
    return not exc.err_code and exc.code in TRANSIENT


async def with_retries(
    call: Callable[[], Awaitable[T]], budget_s: float = 60.0, pause_s: float = 1.0
) -> T:
    """``call()``, again while it fails transiently (an election takes seconds), for up to
    ``budget_s``; any other error, and the last transient one, is raised."""
    deadline = time.monotonic() + budget_s
    while True:
        checkpoint()
        try:
            return await call()
        except JsApiError as exc:
            if not _transient(exc) or time.monotonic() + pause_s > deadline:
                raise
        await asyncio.sleep(pause_s)
