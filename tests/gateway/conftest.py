"""Fixtures: a running gateway against the session's real nats-server."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from streamproc import roles
from streamproc.bus import jsapi, streams
from streamproc.bus.connect import connect
from streamproc.bus.ttlkv import stream_name
from streamproc.gateway.auth.replay import bucket_name
from streamproc.natsd.server import EmbeddedNats
from tests.gateway.harness import Harness, default_settings, start, stop


@pytest.fixture
async def gw(tmp_path: Path, nats_server: EmbeddedNats, prefix: str) -> AsyncIterator[Harness]:
    h = await start(tmp_path, nats_server.url, prefix, default_settings(tmp_path))
    try:
        yield h
    finally:
        await stop(h)
        roles.ROLES.pop("gateway-test", None)
        await drop_streams(nats_server.url, prefix)


@pytest.fixture
async def gw_tokenless(
    tmp_path: Path, nats_server: EmbeddedNats, prefix: str
) -> AsyncIterator[Harness]:
    """A gateway whose webhook sources take no token (``require_token = false``)."""
    h = await start(tmp_path, nats_server.url, prefix, default_settings(tmp_path, tokenless=True))
    try:
        yield h
    finally:
        await stop(h)
        roles.ROLES.pop("gateway-test", None)
        await drop_streams(nats_server.url, prefix)


async def drop_streams(url: str, prefix: str) -> None:
    nc = await connect(url)
    try:
        for name in (*streams.stream_names(prefix), stream_name(bucket_name(prefix))):
            with contextlib.suppress(jsapi.JsApiError):
                await jsapi.request(nc, f"STREAM.DELETE.{name}")
    finally:
        await nc.close()
