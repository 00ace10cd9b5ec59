"""Process settings: defaults, then the config file, then environment variables, then
command-line flags (the file is read by :mod:`streamproc.configfile`)."""

from __future__ import annotations

import re
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import msgspec

from streamproc.configfile.registry import BY_ENV, env_names
from streamproc.configfile.sections import Sections
from streamproc.configfile.typed import SectionProblems, decode, field_name
from streamproc.hlc import validate_node
from streamproc.names import DEFAULT_PREFIX, events_subjects, stream_names

_PREFIX_RE = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")


class ConfigError(ValueError):
    pass


S = TypeVar("S")
_SECTIONS = "sections"


@dataclass(frozen=True)
class Configuration:
    """Every setting of this process, read once at start (by
    :func:`streamproc.configfile.loader.activate`): the config file's values with the environment's
    over them, under their environment names, the file's structured tables, and every key of
    every section decoded from them into one typed object (:attr:`sections`; ``activate``
    decodes it at start, so a bad value of any section stops every process). A role builds its
    settings from its section (:meth:`built`, kept): nothing reads the environment or the file
    after start. The text (:attr:`values`) is still read as given where typing would change
    it (secrets keep their spaces, ``env:NAME`` references, whether a key was given at all),
    by ``config check``'s per-key attribution, and for the audit signing and trusted keys
    (their ``@file`` and JSON forms)."""

    values: Mapping[str, str] = field(default_factory=dict, repr=False)
    """Environment name → the effective text (an empty variable counts as unset). Not in the
    ``repr``: it holds secrets (a settings object printed in a log must not show them)."""
    documents: Mapping[str, Mapping[str, object]] = field(default_factory=dict, repr=False)
    """Section → structured keys of the config file (``gateway`` issuers, webhooks, TLS)."""
    decoded: Sections | None = field(default=None, repr=False, compare=False)
    """:attr:`sections`, when the loader has decoded them already (``None``: on first use).
    Not in the ``repr``: it holds secrets too."""
    _decoded: dict[object, object] = field(default_factory=dict, repr=False, compare=False)

    def get(self, name: str, default: str | None = None) -> str | None:
        """The text of one setting, by its environment name."""
        return self.values.get(name) or default

    def document(self, section: str) -> dict[str, object]:
        """The structured keys the config file gave ``section`` (empty without a file)."""
        return dict(self.documents.get(section, {}))

    def with_values(self, values: Mapping[str, str]) -> Configuration:
        """This configuration with ``values`` over its own (what ``up --demo`` selects)."""
        return Configuration(values={**self.values, **values}, documents=self.documents)

    @property
    def sections(self) -> Sections:
        """Every key of every section, typed: :attr:`values` decoded once (a
        :class:`ConfigError` names each key that does not fit, with its variable)."""
        if self.decoded is not None:
            return self.decoded
        if _SECTIONS not in self._decoded:
            try:
                self._decoded[_SECTIONS] = decode(self.values)
            except SectionProblems as exc:
                raise ConfigError(f"settings: {exc}") from None
        return self._decoded[_SECTIONS]  # type: ignore[return-value]  # stored just above

    def built(self, build: Callable[[Sections], S]) -> S:
        """``build(sections)``, once: a role's settings built from its typed section."""
        if build not in self._decoded:
            self._decoded[build] = build(self.sections)
        return self._decoded[build]  # type: ignore[return-value]  # stored by this build

    def section(self, decode: Callable[[Mapping[str, str]], S]) -> S:
        """``decode(values)``, once: a section's typed settings (its :class:`ConfigError`
        names the bad key, as at start)."""
        if decode not in self._decoded:
            self._decoded[decode] = decode(self.values)
        return self._decoded[decode]  # type: ignore[return-value]  # stored by this decode


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
    configuration: Configuration = msgspec.field(default_factory=lambda: Configuration())
    """Every setting of this process (these came from it): the roles started with these
    settings take their own sections from here."""

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


ENV = env_names(
    "node",
    {
        "data_dir": "node.data_dir",
        "nats_url": "nats.url",
        "nats_port": "nats.port",
        "nats_monitor_port": "nats.monitor_port",
        "http_host": "http.host",
        "http_port": "http.port",
        "ops_host": "http.ops_host",
        "ops_port": "http.ops_port",
        "prefix": "nats.prefix",
        "node_id": "node.id",
        "max_clock_skew_ms": "hlc.max_skew_ms",
        "hlc_reserve_ms": "hlc.reserve_ms",
        "batch": "projector.batch",
        "http_max_body": "http.max_body",
    },
)
"""Field → environment name, through the registry's keys."""


def load(
    overrides: dict[str, object] | None = None, configuration: Configuration | None = None
) -> Settings:
    """Settings from ``configuration``'s typed sections (``None``: the defaults alone), then
    ``overrides`` (flags that were given); the result carries ``configuration`` to the roles."""
    configuration = Configuration() if configuration is None else configuration
    raw: dict[str, object] = {}
    for name, var in ENV.items():
        key = BY_ENV[var]
        value = getattr(getattr(configuration.sections, field_name(key.section)), key.name)
        if isinstance(value, tuple):  # nats.url: the servers as given (``connect`` splits them)
            value = configuration.get(var)
        if value is not None:
            raw[name] = value
    raw.update({k: v for k, v in (overrides or {}).items() if v is not None})
    try:
        settings = msgspec.convert(raw, Settings, strict=False, dec_hook=_dec_hook)
    except msgspec.ValidationError as exc:
        raise ConfigError(str(exc)) from None
    settings.configuration = configuration
    return settings


def _dec_hook(tp: type, obj: object) -> object:
    if tp is Path and isinstance(obj, str):
        return Path(obj)
    raise NotImplementedError
