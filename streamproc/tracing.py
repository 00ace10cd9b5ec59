"""Optional OpenTelemetry spans: ``plan``, ``resolve``, ``enqueue`` (planner) and
``report_call``, ``persist``, ``emit`` (runner).

Off unless ``STREAMPROC_OTEL_EXPORTER`` (``otel.exporter``) is ``otlp`` or ``console``; then
:func:`configure` (called by ``System.start``) needs the ``otel`` extra
(``pip install 'streamproc[otel]'``) and says so if it is missing. While off, :func:`span`
returns one shared no-op context manager and OpenTelemetry is never imported, so the call
sites cost a function call.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from streamproc import __version__
from streamproc.config import ConfigError, Configuration
from streamproc.configfile.registry import env_name
from streamproc.configfile.sections import Otel

log = logging.getLogger(__name__)

EXPORTER_ENV = env_name("otel.exporter")
ENDPOINT_ENV = env_name("otel.endpoint")
EXPORTERS = ("none", "otlp", "console")
SPANS = ("plan", "resolve", "enqueue", "report_call", "persist", "emit")
"""Every span name streamproc emits (docs/observability.md)."""
TRACES_PATH = "/v1/traces"


class _NoSpan:
    """The context manager :func:`span` returns while tracing is off."""

    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


_NOOP = _NoSpan()
_tracer: Any = None
_provider: Any = None
"""The provider :func:`configure` made (the SDK also flushes it at interpreter exit)."""
_configured: str | None = None


def span(name: str, **attributes: Any) -> Any:
    """A span around a ``with`` block (a no-op while tracing is off). ``None`` attribute
    values are left out; the rest should be str, bool, int or float."""
    if _tracer is None:
        return _NOOP
    attrs = {k: v for k, v in attributes.items() if v is not None}
    return _tracer.start_as_current_span(name, attributes=attrs)


def enabled() -> bool:
    return _tracer is not None


def exporter_kind(env: Mapping[str, str]) -> str:
    raw = env.get(EXPORTER_ENV) or "none"
    kind = raw.strip().lower()
    if kind not in EXPORTERS:
        raise ConfigError(f"{EXPORTER_ENV}={raw!r}: one of {', '.join(EXPORTERS)}")
    return kind


def traces_url(endpoint: str) -> str:
    """``http://collector:4318`` → ``http://collector:4318/v1/traces`` (a path is kept)."""
    parts = urlsplit(endpoint)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigError(f"{ENDPOINT_ENV}={endpoint!r}: an http(s) URL of an OTLP/HTTP receiver")
    return endpoint if parts.path not in ("", "/") else endpoint.rstrip("/") + TRACES_PATH


def configure(env: Mapping[str, str]) -> str:
    """:func:`configure_from` the text of ``env``, decoded as at start (tests)."""
    return configure_from(Configuration(values=env).sections.otel)


def configure_from(otel: Otel) -> str:
    """Set up the exporter the typed ``[otel]`` section names, once per process; returns its
    kind.

    Raises :class:`ConfigError` for a bad endpoint, or an exporter configured without the
    ``otel`` extra installed (an unknown exporter is refused by the start's decode)."""
    global _configured, _provider

    kind = otel.exporter
    if kind == "none" or _configured == kind:
        return kind
    endpoint = otel.endpoint
    url = traces_url(endpoint) if endpoint else None
    try:  # deferred: the optional, heavy OpenTelemetry SDK, only when tracing is configured
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter

        if kind == "otlp":
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    except ImportError as exc:
        raise ConfigError(
            f"{EXPORTER_ENV}={kind} needs the optional OpenTelemetry packages "
            f"(missing {exc.name or exc}): pip install 'streamproc[otel]', or set "
            f"{EXPORTER_ENV}=none"
        ) from None
    resource = Resource.create({"service.name": "streamproc", "service.version": __version__})
    provider = TracerProvider(resource=resource)
    exporter = OTLPSpanExporter(endpoint=url) if kind == "otlp" else ConsoleSpanExporter()
    provider.add_span_processor(BatchSpanProcessor(exporter))
    install(provider)
    _provider, _configured = provider, kind
    log.info("tracing: %s exporter%s", kind, f" to {url}" if url else "")
    return kind


def install(provider: Any) -> None:
    """Send spans to ``provider`` (an SDK ``TracerProvider``): what :func:`configure` does,
    and what a test does with an in-memory exporter."""
    global _tracer
    _tracer = provider.get_tracer("streamproc", __version__)


def shutdown() -> None:
    """Export what is buffered and stop the exporter :func:`configure` set up (blocking)."""
    if _provider is not None:
        _provider.shutdown()


def uninstall() -> None:
    """Back to no-op spans (a provider given to :func:`install` is the caller's to shut
    down)."""
    global _tracer, _provider, _configured
    _tracer = _provider = _configured = None
