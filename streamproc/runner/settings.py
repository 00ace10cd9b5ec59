"""Runner settings: defaults, then ``STREAMPROC_RUNNER_*`` / ``STREAMPROC_SCANNER_URL`` (or
``STREAMPROC_SCANNER_PORT``: the loopback reference scanner ``up --demo`` starts)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated

import msgspec
from msgspec import Meta

from streamproc.backends.settings import ScannerSettings
from streamproc.backends.settings import load as load_scanner
from streamproc.config import ConfigError
from streamproc.configfile.registry import env_names

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
_MORE = env_names("runner", {"port": "scanner.port", "backoff": "runner.retry_backoff_s"})
PORT_ENV, BACKOFF_ENV = _MORE["port"], _MORE["backoff"]


def load(env: Mapping[str, str], overrides: dict[str, object] | None = None) -> RunnerSettings:
    """Runner settings from ``env`` (the process's configuration), then ``overrides``."""
    raw: dict[str, object] = {k: env[v] for k, v in ENV.items() if env.get(v)}
    if "scanner_url" not in raw and env.get(PORT_ENV):
        raw["scanner_url"] = f"http://127.0.0.1:{env[PORT_ENV]}"  # up --demo's
    if env.get(BACKOFF_ENV):
        raw["retry_backoff_s"] = env[BACKOFF_ENV].split(",")
    raw.update({k: v for k, v in (overrides or {}).items() if v is not None})
    try:
        out = msgspec.convert(raw, RunnerSettings, strict=False)
    except msgspec.ValidationError as exc:
        raise ConfigError(f"runner settings: {exc}") from None
    out.scanner = load_scanner(env)
    return out
