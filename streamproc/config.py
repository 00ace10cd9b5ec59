"""Process settings: defaults, then the config file, then environment variables, then
command-line flags (the file is read by :mod:`streamproc.configfile`)."""

from __future__ import annotations

import os
import re
import socket
from collections import ChainMap
from collections.abc import Iterator, Mapping
from pathlib import Path

import msgspec

from streamproc.hlc import validate_node
from streamproc.names import DEFAULT_PREFIX, events_subjects, stream_names

_PREFIX_RE = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")


class ConfigError(ValueError):
    pass


_FILE_ENV: dict[str, str] = {}
"""Values from the configuration file, under their environment-variable names."""
_FILE_DOCS: dict[str, dict[str, object]] = {}
"""Structured parts of the configuration file (``gateway`` issuers, webhooks, TLS), by
section; see :mod:`streamproc.configfile`."""


class _SetEnvironment(Mapping[str, str]):
    """``os.environ`` without its empty variables: ``X=`` means unset, as every reader has
    always treated it, so it does not hide the config file's value."""

    def __getitem__(self, key: str) -> str:
        value = os.environ[key]
        if not value:
            raise KeyError(key)
        return value

    def __iter__(self) -> Iterator[str]:
        return (k for k, v in os.environ.items() if v)

    def __len__(self) -> int:
        return sum(1 for v in os.environ.values() if v)


TRUE = frozenset({"1", "true", "yes", "on"})
FALSE = frozenset({"0", "false", "no", "off"})
"""The words of a true/false setting, for every reader (``config check`` included)."""


def flag(text: str) -> bool | None:
    """A true/false setting's value; None for a word that is neither (the caller says how
    it refuses that)."""
    word = text.strip().lower()
    return True if word in TRUE else False if word in FALSE else None


def environment() -> Mapping[str, str]:
    """Every setting reader looks here: the process environment, then the config file."""
    return ChainMap(_SetEnvironment(), _FILE_ENV)  # type: ignore[arg-type]  # ChainMap over two mappings of str; typeshed wants MutableMapping


def file_document(section: str) -> dict[str, object]:
    """The structured keys the config file gave ``section`` (empty without a file)."""
    return dict(_FILE_DOCS.get(section, {}))


def default_node_id() -> str:
    name = re.sub(r"[^A-Za-z0-9._-]", "-", socket.gethostname())[:32].strip("-")
    return name or "node"


class Settings(msgspec.Struct, kw_only=True):
    data_dir: Path = Path("data")
    nats_url: str | None = None
    """An existing server; ``None`` starts the embedded one."""
    nats_host: str = "127.0.0.1"
    nats_port: int = 4222
    nats_monitor_port: int | None = None
    """The embedded server's monitoring endpoint (``/varz``, ``/jsz``) on ``nats_host``;
    ``None``: none."""
    http_host: str = "127.0.0.1"
    http_port: int = 8480
    ops_host: str = "127.0.0.1"
    ops_port: int | None = None
    """The ops listener of a process that serves the API (``/metrics``, which names tenants,
    is never served on the API's port); ``None``: none, and no metrics from such a process."""
    prefix: str = DEFAULT_PREFIX
    node_id: str = msgspec.field(default_factory=default_node_id)
    max_clock_skew_ms: int = 5_000
    hlc_reserve_ms: int = 1_000
    """How far ahead of the last issued time the HLC saves its ceiling (1..1000 ms): what a
    restart after a crash can stamp ahead of the wall clock."""
    batch: int = 1000
    http_max_body: int = 10 * 1024 * 1024
    """Request bodies above this are refused with 413 (after decompression too)."""

    def __post_init__(self) -> None:
        if not _PREFIX_RE.match(self.prefix):
            raise ConfigError(
                f"prefix {self.prefix!r}: 1-32 lowercase letters, digits, '-' or '_', "
                f"starting with a letter"
            )
        try:
            validate_node(self.node_id)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        if not 1 <= self.hlc_reserve_ms <= 1_000:
            raise ConfigError(f"HLC reserve {self.hlc_reserve_ms} ms: between 1 and 1000")
        if self.batch < 1 or self.batch > 10_000:
            raise ConfigError(f"batch {self.batch}: between 1 and 10000")
        if self.ops_port is not None and not 0 <= self.ops_port <= 65535:
            raise ConfigError(f"ops port {self.ops_port}: between 0 and 65535")
        if self.nats_monitor_port is not None and not 1 <= self.nats_monitor_port <= 65535:
            raise ConfigError(f"NATS monitor port {self.nats_monitor_port}: between 1 and 65535")

    @property
    def events_stream(self) -> str:
        return stream_names(self.prefix)[0]

    @property
    def events_subjects(self) -> str:
        """What every event's subject starts with (``<prefix>.events.``)."""
        return events_subjects(self.prefix)

    def state_dir(self, role: str) -> Path:
        return self.data_dir / "state" / role

    @property
    def nats_dir(self) -> Path:
        return self.data_dir / "nats"

    def hlc_file(self, role: str) -> Path:
        return self.data_dir / "hlc" / f"{self.node_id}-{role}.json"


ENV = {
    "data_dir": "STREAMPROC_DATA_DIR",
    "nats_url": "NATS_URL",
    "nats_port": "STREAMPROC_NATS_PORT",
    "nats_monitor_port": "STREAMPROC_NATS_MONITOR_PORT",
    "http_host": "STREAMPROC_HTTP_HOST",
    "http_port": "STREAMPROC_HTTP_PORT",
    "ops_host": "STREAMPROC_OPS_HOST",
    "ops_port": "STREAMPROC_OPS_PORT",
    "prefix": "STREAMPROC_PREFIX",
    "node_id": "STREAMPROC_NODE_ID",
    "max_clock_skew_ms": "STREAMPROC_MAX_CLOCK_SKEW_MS",
    "hlc_reserve_ms": "STREAMPROC_HLC_RESERVE_MS",
    "batch": "STREAMPROC_BATCH",
    "http_max_body": "STREAMPROC_HTTP_MAX_BODY",
}


def load(
    overrides: dict[str, object] | None = None, env: Mapping[str, str] | None = None
) -> Settings:
    """Settings from ``env`` (default: :func:`environment`), then ``overrides`` (flags that
    were given)."""
    env = environment() if env is None else env
    raw: dict[str, object] = {}
    for field, var in ENV.items():
        if env.get(var):
            raw[field] = env[var]
    raw.update({k: v for k, v in (overrides or {}).items() if v is not None})
    try:
        return msgspec.convert(raw, Settings, strict=False, dec_hook=_dec_hook)
    except msgspec.ValidationError as exc:
        raise ConfigError(str(exc)) from None


def _dec_hook(tp: type, obj: object) -> object:
    if tp is Path and isinstance(obj, str):
        return Path(obj)
    raise NotImplementedError
