"""The storage settings, decoded from the process's configuration by the code that opens a
role's stores and projector, and handed to them as constructor arguments: the stores and the
folds themselves read no setting."""

from __future__ import annotations

import math
from collections.abc import Mapping

from streamproc.config import ConfigError
from streamproc.configfile.registry import env_name
from streamproc.state.malloc import DEFAULT_TRIM_S
from streamproc.state.store import DEFAULT_BLOCK_CACHE_MB, DEFAULT_WRITE_BUFFER_MB, StoreSizes

WRITE_BUFFER_ENV = env_name("projector.write_buffer_mb")
BLOCK_CACHE_ENV = env_name("projector.block_cache_mb")
TRIM_ENV = env_name("projector.malloc_trim_s")


def write_buffer_bytes(env: Mapping[str, str]) -> int:
    """``STREAMPROC_WRITE_BUFFER_MB`` (``projector.write_buffer_mb``), validated, in bytes:
    default 8 MB (chosen by the soak, docs/operations.md "Memory"), 0: RocksDB's own defaults."""
    raw = (env.get(WRITE_BUFFER_ENV) or "").strip()
    if not raw:
        return DEFAULT_WRITE_BUFFER_MB << 20
    try:
        mb = int(raw)
    except ValueError:
        raise ConfigError(f"{WRITE_BUFFER_ENV}={raw!r}: not a whole number of MB") from None
    if mb < 0:
        raise ConfigError(f"{WRITE_BUFFER_ENV}={raw}: MB, 0 or more (0: RocksDB's defaults)")
    return mb << 20


def block_cache_bytes(env: Mapping[str, str]) -> int:
    """``STREAMPROC_BLOCK_CACHE_MB`` (``projector.block_cache_mb``), validated, in bytes."""
    raw = (env.get(BLOCK_CACHE_ENV) or "").strip()
    if not raw:
        return DEFAULT_BLOCK_CACHE_MB << 20
    try:
        mb = int(raw)
    except ValueError:
        raise ConfigError(f"{BLOCK_CACHE_ENV}={raw!r}: not a whole number of MB") from None
    if mb < 1:
        raise ConfigError(f"{BLOCK_CACHE_ENV}={raw}: MB, at least 1")
    return mb << 20


def store_sizes(env: Mapping[str, str]) -> StoreSizes:
    """What a RocksDB store of this process is opened with (:class:`RocksStore`)."""
    return StoreSizes(write_buffer_bytes(env), block_cache_bytes(env))


def trim_interval_s(env: Mapping[str, str]) -> float:
    """``STREAMPROC_MALLOC_TRIM_S`` (``projector.malloc_trim_s``), validated: default 5 s,
    0: never trim."""
    raw = (env.get(TRIM_ENV) or "").strip()
    if not raw:
        return DEFAULT_TRIM_S
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{TRIM_ENV}={raw!r}: not a number of seconds") from None
    if not (math.isfinite(value) and value >= 0):
        raise ConfigError(f"{TRIM_ENV}={raw}: seconds, 0 or more (0: never trim)")
    return value
