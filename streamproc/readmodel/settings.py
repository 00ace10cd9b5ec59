"""The read model's settings, read where the gateway role starts (and by ``streamproc config
check``), handed to its projections as constructor arguments."""

from __future__ import annotations

from collections.abc import Mapping

from streamproc.config import ConfigError, Configuration
from streamproc.configfile.registry import env_name
from streamproc.readmodel.retention import DEFAULT_DAYS
from streamproc.readmodel.runs import Runs

RETENTION_ENV = env_name("readmodel.retention_days")
MAX_DAYS = 100 * 366


def retention_days(env: Mapping[str, str]) -> int:
    """Days a finished run stays in the read model (``readmodel.retention_days``)."""
    raw = env.get(RETENTION_ENV, "").strip()
    if not raw:
        return DEFAULT_DAYS
    try:
        days = int(raw)
    except ValueError:
        raise ConfigError(f"{RETENTION_ENV}={raw!r}: a whole number of days") from None
    if not 1 <= days <= MAX_DAYS:
        raise ConfigError(f"{RETENTION_ENV}={days}: between 1 and {MAX_DAYS} days")
    return days


def runs(configuration: Configuration) -> Runs:
    """The runs of the read model as the gateway folds them: with the retention of the typed
    ``[readmodel]`` section (the form ``Configured`` projection factories take)."""
    return Runs(retention_days=configuration.sections.readmodel.retention_days)
