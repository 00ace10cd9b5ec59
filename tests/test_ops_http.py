"""Metrics name tenants, so they are never served where API callers reach (M3): a process
that serves the API keeps ``/healthz`` and ``/readyz`` there and serves ``/metrics`` only on
its ops listener (``ops_port``, loopback unless configured); a role without the API serves
all three on its HTTP port, which is its ops listener."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import aiohttp
import pytest

from streamproc import metrics
from streamproc.config import ConfigError, Configuration, Settings, load
from streamproc.natsd.server import EmbeddedNats, free_port
from streamproc.roles import System
from streamproc.runtime.app import ListenError
from tests.gateway.conftest import drop_streams


@asynccontextmanager
async def running(settings: Settings, roles: list[str]) -> AsyncIterator[System]:
    system = System(settings, roles)
    await system.start()
    try:
        yield system
    finally:
        await system.close()
        assert settings.nats_url is not None
        await drop_streams(settings.nats_url, settings.prefix)


async def get(url: str) -> tuple[int, str]:
    async with aiohttp.ClientSession() as s, s.get(url) as r:
        return r.status, await r.text()


async def test_the_api_listener_serves_no_metrics_the_ops_listener_does(
    nats_server: EmbeddedNats, prefix: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("STREAMPROC_GATEWAY_CONFIG", raising=False)
    metrics.PLANNER_BACKLOG.labels("customer-secret").set(0)  # a series naming a tenant
    ops_port = free_port()
    settings = Settings(data_dir=tmp_path, nats_url=nats_server.url, prefix=prefix,
                        http_port=free_port(), ops_port=ops_port)  # fmt: skip
    async with running(settings, ["gateway"]) as system:
        assert system.ops_url == f"http://127.0.0.1:{ops_port}"
        status, body = await get(f"{system.http_url}/metrics")
        assert status == 404 and "customer-secret" not in body
        for path in ("healthz", "readyz"):  # load balancers still check the API port
            assert (await get(f"{system.http_url}/{path}"))[0] == 200
            assert (await get(f"{system.ops_url}/{path}"))[0] == 200
        status, body = await get(f"{system.ops_url}/metrics")
        assert status == 200 and 'tenant="customer-secret"' in body
        assert "scheduler_http_request_duration_seconds" in body
        status, _ = await get(f"{system.ops_url}/api/v1/scheduler/schedules")
        assert status == 404, "the ops listener serves no API"


async def test_without_an_ops_port_a_gateway_process_serves_no_metrics_at_all(
    nats_server: EmbeddedNats, prefix: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("STREAMPROC_GATEWAY_CONFIG", raising=False)
    settings = Settings(data_dir=tmp_path, nats_url=nats_server.url, prefix=prefix,
                        http_port=free_port())  # fmt: skip
    async with running(settings, ["gateway", "planner"]) as system:
        assert system.ops_url == ""
        assert (await get(f"{system.http_url}/metrics"))[0] == 404


async def test_a_role_without_the_api_serves_metrics_on_its_own_port(
    nats_server: EmbeddedNats, prefix: str, tmp_path: Path
) -> None:
    ops_port = free_port()
    settings = Settings(data_dir=tmp_path, nats_url=nats_server.url, prefix=prefix,
                        http_port=free_port(), ops_port=ops_port)  # fmt: skip
    async with running(settings, ["activity"]) as system:
        status, body = await get(f"{system.http_url}/metrics")
        assert status == 200 and "streamproc_projector_last_applied_sequence" in body
        assert system.ops_url == "", "its HTTP listener is its ops listener"
        with socket.create_server(("127.0.0.1", ops_port)):
            pass  # nothing listens there


async def test_a_taken_ops_port_is_refused_before_anything_starts(
    nats_server: EmbeddedNats, prefix: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("STREAMPROC_GATEWAY_CONFIG", raising=False)
    with socket.create_server(("127.0.0.1", 0)) as busy:
        port = busy.getsockname()[1]
        settings = Settings(data_dir=tmp_path, nats_url=nats_server.url, prefix=prefix,
                            http_port=free_port(), ops_port=port)  # fmt: skip
        system = System(settings, ["gateway"])
        with pytest.raises(ListenError, match=f"cannot listen on 127.0.0.1:{port}"):
            await system.start()
        await system.close()
    assert system.nc is None, "refused before NATS"


def test_ops_settings_from_the_environment() -> None:
    s = load(
        configuration=Configuration(
            values={"STREAMPROC_OPS_PORT": "8479", "STREAMPROC_OPS_HOST": "10.0.0.5"}
        )
    )
    assert (s.ops_host, s.ops_port) == ("10.0.0.5", 8479)
    assert load(configuration=Configuration(values={})).ops_port is None
    with pytest.raises(ConfigError):
        load(configuration=Configuration(values={"STREAMPROC_OPS_PORT": "70000"}))
