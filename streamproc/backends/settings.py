"""``scanner.kind`` and the per-kind settings ``scanner.<kind>.*`` (docs/configuration.md)."""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import Annotated, Literal

import msgspec
from msgspec import Meta

from streamproc.config import ConfigError, Configuration
from streamproc.configfile.registry import env_name
from streamproc.configfile.sections import Sections
from streamproc.configfile.typed import field_name

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


def from_sections(sections: Sections) -> ScannerSettings:
    """``scanner.*`` from the typed ``[scanner]`` section and its kind's table (decoded at
    start); the tool's extra arguments are split here, as a POSIX shell splits words."""
    scanner = sections.scanner
    kind = scanner.kind
    raw: dict[str, object] = {
        "kind": kind, "kev_catalog": scanner.kev_catalog, "fail_on": scanner.fail_on,
    }  # fmt: skip
    if kind != "stella":
        table = getattr(sections, field_name(f"scanner.{kind}"))
        tool: dict[str, object] = {
            "path": table.path or kind, "timeout_s": table.timeout_s,
            "concurrency": table.concurrency,
        }  # fmt: skip
        if table.args:
            try:
                tool["args"] = shlex.split(table.args)
            except ValueError as exc:
                raise ConfigError(f"{env_of(kind, 'args')}: {exc}") from None
        if kind == "trivy":
            tool["server"] = table.server
        raw["tool"] = tool
    try:
        return msgspec.convert(raw, ScannerSettings, strict=False)
    except msgspec.ValidationError as exc:
        raise ConfigError(f"scanner settings: {exc}") from None


def load(env: Mapping[str, str]) -> ScannerSettings:
    """:func:`from_sections` the text of ``env``, decoded as at start (tests)."""
    return from_sections(Configuration(values=env).sections)
