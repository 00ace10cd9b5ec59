"""Auditor settings, decoded from the process's configuration (the config file and the
environment, read once at start) with defaults (the shared Settings stay lean).

- ``STREAMPROC_AUDIT_BATCH_SIZE`` (1000): entries per signed batch snapshot.
- ``STREAMPROC_AUDIT_BATCH_INTERVAL_S`` (300): snapshot at least this often while entries wait.
- ``STREAMPROC_AUDIT_VERIFY_PERIOD_S`` (3600): full chain verification period (0: start-up only).
- ``STREAMPROC_AUDIT_VERIFY_ON_START`` (1): verify every chain when the auditor starts.
- ``STREAMPROC_AUDIT_MAX_CLOCK_SKEW_MS`` (``STREAMPROC_MAX_CLOCK_SKEW_MS``, 5000): entries whose
  HLC is further ahead of the auditor's clock are held (not snapshotted).

Keys are configured separately (see :mod:`streamproc.audit.signing`).
"""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

from streamproc.config import ConfigError, Settings
from streamproc.configfile.registry import env_names


class AuditSettings(msgspec.Struct, frozen=True, kw_only=True):
    batch_size: int = 1000
    batch_interval_s: float = 300.0
    verify_period_s: float = 3600.0
    verify_on_start: bool = True
    max_clock_skew_ms: int = 5_000

    def __post_init__(self) -> None:
        if not 1 <= self.batch_size <= 100_000:
            raise ConfigError(f"audit batch size {self.batch_size}: between 1 and 100000")
        if self.batch_interval_s <= 0:
            raise ConfigError(f"audit batch interval {self.batch_interval_s} s: must be > 0")
        if self.verify_period_s < 0:
            raise ConfigError(f"audit verify period {self.verify_period_s} s: must be >= 0")
        if self.max_clock_skew_ms < 0:
            raise ConfigError(f"audit max clock skew {self.max_clock_skew_ms} ms: must be >= 0")


ENV = env_names("audit", AuditSettings.__struct_fields__)
"""Field → environment name (the registry's ``audit.<field>`` keys)."""


def load(settings: Settings | None, env: Mapping[str, str]) -> AuditSettings:
    """Audit settings from ``env`` (the process's configuration); the skew defaults to the
    process-wide ``max_clock_skew_ms``."""
    raw: dict[str, object] = {}
    if settings is not None:
        raw["max_clock_skew_ms"] = settings.max_clock_skew_ms
    for field, var in ENV.items():
        value = env.get(var, "").strip()
        if value:
            raw[field] = value
    try:
        return msgspec.convert(raw, AuditSettings, strict=False)
    except msgspec.ValidationError as exc:
        raise ConfigError(f"audit settings: {exc}") from None
