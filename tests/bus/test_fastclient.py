"""``FastClient.publish_hpub`` refuses what nats-py's ``publish`` refuses, against a real
nats-server: a closed, draining or (buffer disabled) reconnecting connection raises at once
instead of queueing a message that is never sent."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import pytest
from nats import errors

from streamproc.bus.connect import connect
from streamproc.bus.fastclient import FastClient
from streamproc.bus.publisher import msg_header
from streamproc.natsd.server import EmbeddedNats, free_port
from tests.helpers import eventually

HEADER = msg_header("guard-1")


async def received(nc: FastClient, subject: str) -> list[bytes]:
    """Start collecting what arrives on ``subject`` (the list fills as messages come)."""
    got: list[bytes] = []
    await nc.subscribe_raw(subject, lambda _s, _r, data, _h: got.append(data))
    await nc.flush()
    return got


async def test_publish_on_a_closed_connection_raises(nats_server: EmbeddedNats) -> None:
    nc = await connect(nats_server.url)
    await nc.close()
    with pytest.raises(errors.ConnectionClosedError):
        await nc.publish_hpub("guard.closed", "", HEADER, b"lost")


async def test_publish_while_draining_pubs_raises_and_sends_nothing(
    nats_server: EmbeddedNats, nc: FastClient, prefix: str
) -> None:
    subject = f"{prefix}.guard.drain"
    got = await received(nc, subject)
    sender = await connect(nats_server.url)
    await sender.publish_hpub(subject, "", HEADER, b"before")
    drain = asyncio.create_task(sender.drain())
    while not sender.is_draining_pubs:  # drain flushes (a round trip) in this state
        assert not drain.done(), "drain finished before its publish phase was seen"
        await asyncio.sleep(0)
    with pytest.raises(errors.ConnectionDrainingError):
        await sender.publish_hpub(subject, "", HEADER, b"during")
    await drain
    with pytest.raises(errors.ConnectionClosedError):
        await sender.publish_hpub(subject, "", HEADER, b"after")
    await eventually(lambda: got, what="the message published before the drain")
    await nc.flush()
    assert got == [b"before"]


async def test_publish_while_reconnecting_without_a_buffer_raises(tmp_path: Path) -> None:
    port = free_port()
    srv = EmbeddedNats(tmp_path / "nats", port=port).start()
    nc = await connect(srv.url, pending_size=0, reconnect_time_wait=0.05)
    try:
        srv.stop()
        await eventually(lambda: nc.is_reconnecting, what="the client noticing the loss")
        with pytest.raises(errors.OutboundBufferLimitError):
            await nc.publish_hpub("guard.reconnecting", "", HEADER, b"lost")
    finally:
        await nc.close()


async def test_publish_while_reconnecting_is_buffered_and_sent_after(tmp_path: Path) -> None:
    """nats-py's semantics: with a buffer, a publish during a reconnect waits in it."""
    port = free_port()
    srv = EmbeddedNats(tmp_path / "nats", port=port).start()
    nc = await connect(srv.url, pending_size=1 << 20, reconnect_time_wait=0.05)
    try:
        got = await received(nc, "guard.buffered")
        srv.stop()
        await eventually(lambda: nc.is_reconnecting, what="the client noticing the loss")
        await nc.publish_hpub("guard.buffered", "", HEADER, b"kept")
        with pytest.raises(errors.OutboundBufferLimitError):  # more than the buffer holds
            await nc.publish_hpub("guard.buffered", "", HEADER, b"x" * (1 << 20))
        srv = EmbeddedNats(tmp_path / "nats", port=port).start()
        await eventually(lambda: got, what="the buffered message after the reconnect")
        assert got == [b"kept"]
    finally:
        await nc.close()
        srv.stop()


async def test_publish_with_an_empty_subject_raises(nc: FastClient) -> None:
    with pytest.raises(errors.BadSubjectError):
        await nc.publish_hpub("", "", HEADER, b"nowhere")


async def test_a_pong_for_an_abandoned_flush_keeps_the_connection(
    nats_server: EmbeddedNats,
) -> None:
    """A flush cancelled while it waits for its PONG (a stop, a timeout around it) leaves a
    cancelled future for that PONG. nats-py set its result regardless: the read loop died on
    the InvalidStateError ("nats: encountered error" in the log) and nothing more was read
    until the connection was found stale, minutes later."""
    nc = await connect(nats_server.url)
    try:
        abandoned = 0
        for _ in range(200):
            flushing = asyncio.create_task(nc.flush(5))
            while not nc._pongs:
                await asyncio.sleep(0)
            pong = nc._pongs[-1]
            await asyncio.sleep(0)  # into its wait for the PONG
            flushing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await flushing
            abandoned += pong.cancelled()  # else its PONG had come first
            if abandoned:
                break
        assert abandoned, "no flush was abandoned with its PONG still to come"
        await nc.flush(2)  # read after the abandoned ones' PONGs: the read loop is alive
        assert nc.is_connected and nc._reading_task is not None
        assert not nc._reading_task.done()
    finally:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(10):  # a dead read loop held close() for 2 minutes
                await nc.close()
