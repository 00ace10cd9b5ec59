"""Runner settings: defaults, then ``STREAMPROC_RUNNER_*`` / ``STREAMPROC_SCANNER_URL`` (or
``STREAMPROC_SCANNER_PORT``: the loopback reference scanner ``up --demo`` starts)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated

import msgspec
from msgspec import Meta

from streamproc.backends.settings import ScannerSettings
from streamproc.backends.settings import from_sections as scanner_from_sections
from streamproc.config import ConfigError, Configuration
from streamproc.configfile.registry import env_names
from streamproc.configfile.sections import Sections

Positive = Annotated[float, Meta(gt=0)]


class RunnerSettings(msgspec.Struct, kw_only=True):
    scanner_url: str = "http://127.0.0.1:8490"
    workers: Annotated[int, Meta(ge=1, le=256)] = 2
    """Segments processed at once by this runner process."""
    inflight: Annotated[int, Meta(ge=1, le=1024)] = 8
    """Scanner calls in flight per segment (capped by the schedule's limits.parallelism)."""
    ack_wait_s: Positive = 30.0
    """A segment whose runner stops heartbeating is redelivered after this long."""
    max_deliver: Annotated[int, Meta(ge=1, le=100)] = 5
    retry_backoff_s: list[float] = msgspec.field(default_factory=lambda: [1.0, 5.0, 15.0, 60.0])
    """Delay before redelivering a segment whose attempt failed, by attempt number."""
    call_timeout_s: Positive = 10.0
    call_attempts: Annotated[int, Meta(ge=1, le=100)] = 8
    call_budget_s: Positive = 60.0
    """Time one image may spend retrying transient errors before the attempt fails."""
    backoff_base_s: Positive = 0.1
    backoff_cap_s: Positive = 5.0
    discovery_s: Positive = 1.0
    idle_poll_s: Positive = 0.1
    sync_timeout_s: Positive = 10.0
    """How long a segment waits for this runner's projection to reach the log's head."""
    scanner: ScannerSettings = msgspec.field(default_factory=ScannerSettings)
    """What answers: ``scanner.kind`` and its settings."""

    @property
    def heartbeat_s(self) -> float:
        return self.ack_wait_s / 3


ENV = env_names(
    "runner",
    {
        "scanner_url": "scanner.url",
        **{f: f"runner.{f}" for f in ("workers", "inflight", "ack_wait_s", "max_deliver")},
        **{f: f"runner.{f}" for f in ("call_timeout_s", "call_attempts", "call_budget_s")},
    },
)
"""Field → environment name (the registry's keys)."""
URL_ENV, PORT_ENV = ENV["scanner_url"], env_names("runner", {"port": "scanner.port"})["port"]


def from_sections(
    sections: Sections, *, url_set: bool, overrides: dict[str, object] | None = None
) -> RunnerSettings:
    """Runner settings from the typed ``[runner]`` and ``[scanner]`` sections, then
    ``overrides``. ``url_set``: whether ``scanner.url`` was given; without it the runners
    call the reference scanner ``up --demo`` starts on ``scanner.port`` (the typed section
    cannot tell an unset URL from its default)."""
    raw: dict[str, object] = msgspec.structs.asdict(sections.runner)
    scanner = sections.scanner
    raw["scanner_url"] = scanner.url if url_set else f"http://127.0.0.1:{scanner.port}"
    raw.update({k: v for k, v in (overrides or {}).items() if v is not None})
    try:
        out = msgspec.convert(raw, RunnerSettings, strict=False)
    except msgspec.ValidationError as exc:
        raise ConfigError(f"runner settings: {exc}") from None
    out.scanner = scanner_from_sections(sections)
    return out


def configured(
    configuration: Configuration, overrides: dict[str, object] | None = None
) -> RunnerSettings:
    """The process's runner settings (its typed sections; whether the URL was given is read
    off its text, which is not parsed again)."""
    return from_sections(
        configuration.sections, url_set=bool(configuration.get(URL_ENV)), overrides=overrides
    )


def load(env: Mapping[str, str], overrides: dict[str, object] | None = None) -> RunnerSettings:
    """Runner settings from the text of ``env``, decoded as at start (``config check`` and
    tests), then ``overrides``."""
    return configured(Configuration(values=env), overrides)
