"""The storage settings, built from the process's typed ``[projector]`` section by the code
that opens a role's stores and projector (:func:`sizes_from`, :func:`trim_from`), and handed
to them as constructor arguments: the stores and the folds themselves read no setting. The
text readers (:func:`store_sizes`, :func:`trim_interval_s`) take environment names, for
``config check`` and tests."""

from __future__ import annotations

import math
from collections.abc import Mapping

from streamproc.config import ConfigError
from streamproc.configfile.registry import env_name
from streamproc.configfile.sections import Sections
from streamproc.state.malloc import DEFAULT_TRIM_S
from streamproc.state.store import DEFAULT_BLOCK_CACHE_MB, DEFAULT_WRITE_BUFFER_MB, StoreSizes

WRITE_BUFFER_ENV = env_name("projector.write_buffer_mb")
BLOCK_CACHE_ENV = env_name("projector.block_cache_mb")
TRIM_ENV = env_name("projector.malloc_trim_s")


def _megabytes(env: Mapping[str, str], name: str, default_mb: int, least: int, rule: str) -> int:
    """A size setting in whole MB, validated, in bytes (``rule`` says what it allows)."""
    raw = (env.get(name) or "").strip()
    if not raw:
        return default_mb << 20
    try:
        mb = int(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r}: not a whole number of MB") from None
    if mb < least:
        raise ConfigError(f"{name}={raw}: MB, {rule}")
    return mb << 20


def write_buffer_bytes(env: Mapping[str, str]) -> int:
    """``STREAMPROC_WRITE_BUFFER_MB`` (``projector.write_buffer_mb``), validated, in bytes:
    default 8 MB (chosen by the soak, docs/operations.md "Memory"), 0: RocksDB's own defaults."""
    return _megabytes(
        env, WRITE_BUFFER_ENV, DEFAULT_WRITE_BUFFER_MB, 0, "0 or more (0: RocksDB's defaults)"
    )


def block_cache_bytes(env: Mapping[str, str]) -> int:
    """``STREAMPROC_BLOCK_CACHE_MB`` (``projector.block_cache_mb``), validated, in bytes."""
    return _megabytes(env, BLOCK_CACHE_ENV, DEFAULT_BLOCK_CACHE_MB, 1, "at least 1")


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


def sizes_from(sections: Sections) -> StoreSizes:
    """:func:`store_sizes` from the typed ``[projector]`` section (bounds checked at start)."""
    p = sections.projector
    return StoreSizes(p.write_buffer_mb << 20, p.block_cache_mb << 20)


def trim_from(sections: Sections) -> float:
    """:func:`trim_interval_s` from the typed ``[projector]`` section."""
    return sections.projector.malloc_trim_s
