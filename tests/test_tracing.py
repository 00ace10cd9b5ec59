"""OpenTelemetry spans: off (and not even imported) by default; the six span names during a
real end-to-end run; OTLP/HTTP export to a real receiver; clear errors for bad settings."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from streamproc import tracing
from streamproc.config import ConfigError
from streamproc.natsd.server import EmbeddedNats
from tests.flows import feedser_run


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.install(provider)
    yield exporter
    tracing.uninstall()
    provider.shutdown()


async def test_the_six_spans_of_an_end_to_end_run(
    spans: InMemorySpanExporter,
    nats_server: EmbeddedNats,
    prefix: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with feedser_run(nats_server, prefix, tmp_path, monkeypatch) as flow:
        run_ids = {str(m["data"]["runId"]) for m in flow.notify}
    got = spans.get_finished_spans()
    assert {s.name for s in got} >= set(tracing.SPANS)
    assert set(tracing.SPANS) == {"plan", "resolve", "enqueue", "report_call", "persist", "emit"}
    (plan,) = [s for s in got if s.name == "plan" and s.attributes["run_id"] in run_ids]
    assert plan.attributes["tenant"] == "demo"
    for child in ("resolve", "enqueue"):
        (c,) = [s for s in got if s.name == child and s.parent is not None]
        assert c.parent is not None and c.parent.span_id == plan.context.span_id
        assert c.context.trace_id == plan.context.trace_id
    per_image = [s for s in got if s.name in ("report_call", "persist", "emit")]
    assert {s.attributes["run_id"] for s in per_image} <= run_ids
    images = {s.attributes["digest"] for s in per_image if s.name == "persist"}
    assert len(images) == len(flow.demo.images)
    assert {s.attributes["kind"] for s in per_image if s.name == "emit"} == {
        "rescan.delta",
        "report.ready",
    }


def test_off_by_default_costs_no_import() -> None:
    code = (
        "import sys\n"
        "import streamproc.runtime.app, streamproc.planner.reactor, streamproc.runner.segment\n"
        "from streamproc import tracing\n"
        "assert tracing.configure({}) == 'none' and not tracing.enabled()\n"
        "with tracing.span('plan', run_id='r', tenant=None) as s:\n"
        "    assert s is None\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert out.stdout.strip() == "[]"


def test_a_configured_exporter_without_the_extra_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "opentelemetry.exporter.otlp.proto.http.trace_exporter", None)
    with pytest.raises(ConfigError, match=r"pip install 'streamproc\[otel\]'"):
        tracing.configure({tracing.EXPORTER_ENV: "otlp"})
    assert not tracing.enabled()


def test_settings_are_validated() -> None:
    with pytest.raises(ConfigError, match="one of none, otlp, console"):
        tracing.configure({tracing.EXPORTER_ENV: "jaeger"})
    with pytest.raises(ConfigError, match="OTLP/HTTP receiver"):
        tracing.configure({tracing.EXPORTER_ENV: "otlp", tracing.ENDPOINT_ENV: "collector:4318"})
    assert tracing.traces_url("http://c:4318") == "http://c:4318/v1/traces"
    assert tracing.traces_url("https://c/otlp/v1/traces") == "https://c/otlp/v1/traces"
    assert not tracing.enabled()


async def test_otlp_spans_reach_the_configured_endpoint() -> None:
    received: list[ExportTraceServiceRequest] = []

    async def traces(request: web.Request) -> web.Response:
        msg = ExportTraceServiceRequest()
        msg.ParseFromString(await request.read())
        received.append(msg)
        return web.Response(status=200)

    app = web.Application()
    app.router.add_post("/v1/traces", traces)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    env = {tracing.EXPORTER_ENV: "otlp", tracing.ENDPOINT_ENV: f"http://127.0.0.1:{port}"}
    try:
        assert tracing.configure(env) == "otlp"
        with tracing.span("plan", tenant="t1", run_id="r1"), tracing.span("resolve"):
            pass
        # The batch processor's thread posts with blocking I/O: flush off the event loop.
        await asyncio.to_thread(tracing.shutdown)
    finally:
        tracing.uninstall()
        await runner.cleanup()
    scopes = [ss for r in received for rs in r.resource_spans for ss in rs.scope_spans]
    names = [s.name for ss in scopes for s in ss.spans]
    assert sorted(names) == ["plan", "resolve"]
    resource = received[0].resource_spans[0].resource.attributes
    assert {a.key: a.value.string_value for a in resource}["service.name"] == "streamproc"
