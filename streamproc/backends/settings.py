"""``scanner.kind`` and the per-kind settings ``scanner.<kind>.*`` (docs/configuration.md)."""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import Annotated, Literal

import msgspec
from msgspec import Meta

from streamproc.config import ConfigError
from streamproc.configfile.registry import env_name

Kind = Literal["stella", "trivy", "grype", "osv-scanner"]
KINDS: tuple[str, ...] = ("stella", "trivy", "grype", "osv-scanner")
TOOLS: tuple[str, ...] = KINDS[1:]
KIND_ENV = env_name("scanner.kind")


def env_of(kind: str, field: str) -> str:
    """``STREAMPROC_SCANNER_OSV_SCANNER_PATH`` for (``osv-scanner``, ``path``)."""
    return f"STREAMPROC_SCANNER_{kind.upper().replace('-', '_')}_{field.upper()}"


class ToolSettings(msgspec.Struct, kw_only=True):
    path: str
    """The executable: a name looked up on PATH, or a path."""
    args: list[str] = []
    """Extra arguments after the fixed ones (``STREAMPROC_SCANNER_<KIND>_ARGS``, split as a
    POSIX shell splits words; no shell ever runs)."""
    timeout_s: Annotated[float, Meta(gt=0)] = 120.0
    concurrency: Annotated[int, Meta(ge=1, le=64)] = 2
    server: str | None = None
    """Trivy only: a ``trivy server`` URL (``--server``)."""


class ScannerSettings(msgspec.Struct, kw_only=True):
    kind: Kind = "stella"
    tool: ToolSettings | None = None
    """The settings of ``kind`` (None for ``stella``)."""
    kev_catalog: str | None = None
    fail_on: Literal["low", "medium", "high", "critical"] = "high"


def load(env: Mapping[str, str]) -> ScannerSettings:
    """``scanner.*`` from ``env`` (the process's configuration)."""
    kind = (env.get(KIND_ENV) or "stella").strip()
    if kind not in KINDS:
        raise ConfigError(f"{KIND_ENV}={kind!r}: one of {', '.join(KINDS)}")
    raw: dict[str, object] = {"kind": kind}
    if env.get(env_name("scanner.kev_catalog")):
        raw["kev_catalog"] = env[env_name("scanner.kev_catalog")]
    if env.get(env_name("scanner.fail_on")):
        raw["fail_on"] = env[env_name("scanner.fail_on")].strip()
    if kind != "stella":
        tool: dict[str, object] = {"path": env.get(env_of(kind, "path")) or kind}
        for field in ("timeout_s", "concurrency"):
            if env.get(env_of(kind, field)):
                tool[field] = env[env_of(kind, field)]
        if env.get(env_of(kind, "args")):
            try:
                tool["args"] = shlex.split(env[env_of(kind, "args")])
            except ValueError as exc:
                raise ConfigError(f"{env_of(kind, 'args')}: {exc}") from None
        if kind == "trivy" and env.get(env_of(kind, "server")):
            tool["server"] = env[env_of(kind, "server")]
        raw["tool"] = tool
    try:
        return msgspec.convert(raw, ScannerSettings, strict=False)
    except msgspec.ValidationError as exc:
        raise ConfigError(f"scanner settings: {exc}") from None
