"""``FastParser`` gives exactly what nats-py's own parser gives, however the server's bytes
are cut into reads: every frame type (MSG, HMSG, +OK, -ERR, PING, PONG, INFO) split at every
byte boundary, byte by byte, and in arbitrary pieces (hypothesis)."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from nats.protocol.parser import Parser

from streamproc.bus.fastclient import FastParser

Event = tuple[Any, ...]


class Recorder:
    """Stands in for the client: records what the parser hands it, in order."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    async def _process_msg(
        self, sid: int, subject: bytes, reply: bytes, data: bytes, headers: bytes | None
    ) -> None:
        # nats-py passes None for "no header block", the fast path b"": the same message.
        self.events.append(("msg", sid, bytes(subject), bytes(reply), data, headers or b""))

    async def _process_ping(self) -> None:
        self.events.append(("ping",))

    async def _process_pong(self) -> None:
        self.events.append(("pong",))

    async def _process_info(self, info: dict[str, Any]) -> None:
        self.events.append(("info", info))

    async def _process_err(self, err: str) -> None:
        self.events.append(("err", err))


def msg(subject: bytes, sid: int, reply: bytes, payload: bytes) -> bytes:
    mid = b" %s" % reply if reply else b""
    return b"MSG %s %d%s %d\r\n%s\r\n" % (subject, sid, mid, len(payload), payload)


def hmsg(subject: bytes, sid: int, reply: bytes, header: bytes, payload: bytes) -> bytes:
    mid = b" %s" % reply if reply else b""
    size = len(header) + len(payload)
    return b"HMSG %s %d%s %d %d\r\n%s%s\r\n" % (
        subject,
        sid,
        mid,
        len(header),
        size,
        header,
        payload,
    )


ACK = b"$JS.ACK.S.C.1.7.7.1700000000000000000.3"
FRAMES: dict[str, bytes] = {
    "msg": msg(b"ev.t1.run.9", 3, b"", b'{"kind":"run.started"}'),
    "msg-reply": msg(b"ev.t1.run.9", 3, ACK, b"payload with \r\nMSG inside\r\n"),
    "msg-empty": msg(b"ev.x", 12, b"_INBOX.a.1", b""),
    "hmsg": hmsg(b"ev.t1", 4, b"", b"NATS/1.0\r\nNats-Msg-Id: a\r\n\r\n", b"body"),
    "hmsg-reply": hmsg(b"ev.t1", 4, ACK, b"NATS/1.0\r\nX: 1\r\n\r\n", b"HMSG 1 2\r\n"),
    "hmsg-status": hmsg(b"_INBOX.a.2", 5, b"", b"NATS/1.0 408 Request Timeout\r\n\r\n", b""),
    "ok": b"+OK\r\n",
    "err": b"-ERR 'Permissions Violation for Publish to \"x\"'\r\n",
    "ping": b"PING\r\n",
    "pong": b"PONG\r\n",
    "info": b'INFO {"server_id":"N1","max_payload":1048576,"headers":true}\r\n',
}
STREAM = b"".join(FRAMES.values()) + FRAMES["msg"]
"""Every frame, each after another kind, ending on a fast-path frame."""


async def _parse(parser_type: type[Parser], reads: list[bytes]) -> list[Event]:
    rec = Recorder()
    parser = parser_type(rec)
    for data in reads:
        await parser.parse(data)
    assert not parser.buf, f"{parser_type.__name__} left {bytes(parser.buf)!r} unparsed"
    return rec.events


def parse(parser_type: type[Parser], reads: list[bytes]) -> list[Event]:
    return asyncio.run(_parse(parser_type, reads))


def cuts(data: bytes, points: list[int]) -> list[bytes]:
    edges = [0, *sorted(points), len(data)]
    return [data[a:b] for a, b in itertools.pairwise(edges)]


REFERENCE = parse(Parser, [STREAM])


def test_the_reference_holds_every_frame() -> None:
    """nats-py's parser, one read: the expected output, and it covers every frame type."""
    assert [e[0] for e in REFERENCE] == [
        *["msg"] * 6,
        "err",
        "ping",
        "pong",
        "info",
        "msg",
    ]  # +OK yields nothing
    assert parse(FastParser, [STREAM]) == REFERENCE


def test_every_frame_split_at_every_byte_boundary() -> None:
    async def run() -> None:
        for i in range(len(STREAM) + 1):
            got = await _parse(FastParser, [STREAM[:i], STREAM[i:]])
            assert got == REFERENCE, (
                f"split at byte {i}: {STREAM[:i][-20:]!r} | {STREAM[i:][:20]!r}"
            )

    asyncio.run(run())


def test_every_frame_alone_split_at_every_pair_of_boundaries() -> None:
    """Three reads per frame, at every pair of cut points, each frame between two messages."""

    async def run() -> None:
        lead, tail = FRAMES["msg-reply"], FRAMES["hmsg"]
        for name, frame in FRAMES.items():
            data = lead + frame + tail
            want = await _parse(Parser, [data])
            for i in range(len(lead), len(lead) + len(frame) + 1):
                for j in range(i, len(lead) + len(frame) + 1):
                    got = await _parse(FastParser, cuts(data, [i, j]))
                    assert got == want, f"{name} cut at {i - len(lead)} and {j - len(lead)}"

    asyncio.run(run())


def test_byte_by_byte() -> None:
    assert parse(FastParser, [STREAM[i : i + 1] for i in range(len(STREAM))]) == REFERENCE


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, len(STREAM)), max_size=12))
def test_any_cutting_into_reads(points: list[int]) -> None:
    assert parse(FastParser, cuts(STREAM, points)) == REFERENCE
