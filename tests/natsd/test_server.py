"""The embedded nats-server: starts on loopback, refuses a taken port with a clear error."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from streamproc.bus.connect import NatsConnectError, connect
from streamproc.natsd.server import EmbeddedNats, NatsServerError, free_port


async def test_embedded_server_starts_with_jetstream_and_stops(tmp_path: Path) -> None:
    srv = EmbeddedNats(tmp_path / "nats", port=free_port()).start()
    try:
        assert srv.url.startswith("nats://127.0.0.1:")
        nc = await connect(srv.url)
        v = nc.connected_server_version
        assert (v.major, v.minor) >= (2, 14)
        assert nc._server_info.get("jetstream") is True
        assert nc.max_payload == 8 * 1024 * 1024
        await nc.close()
    finally:
        srv.stop()
    assert srv.proc is not None and srv.proc.poll() is not None


def test_port_in_use_is_a_clear_error(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(NatsServerError, match="exited"):
            EmbeddedNats(tmp_path / "nats", port=port).start(timeout=10)


async def test_unreachable_url_is_a_clear_error() -> None:
    with pytest.raises(NatsConnectError, match=r"cannot connect to NATS at nats://127\.0\.0\.1:1"):
        await connect("nats://127.0.0.1:1")
