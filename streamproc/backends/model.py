"""What every tool's output is parsed into, and the named reasons a tool call fails with."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Reason = Literal["missing_tool", "timeout", "exit_status", "unparseable_output", "sbom_missing"]
"""Why a tool call failed: the ``reason`` label of ``scheduler_runner_errors_total``."""

_WORDS = {
    "negligible": "low",
    "unknown": "low",
    "low": "low",
    "moderate": "medium",
    "medium": "medium",
    "high": "high",
    "important": "high",
    "critical": "critical",
}


class ToolError(Exception):
    """A tool call that gave no usable answer: never a PASS."""

    def __init__(self, reason: Reason, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


def severity(word: str | None) -> str:
    """A tool's severity word as ours. ``Negligible`` and ``Unknown`` (the tool knows no
    score) count as low: a finding is kept, never dropped for want of a score."""
    return _WORDS.get((word or "").strip().lower(), "low")


def cvss_band(score: float) -> str:
    """A CVSS base score as a severity (CVSS v3 bands; 0 counts as low)."""
    return "critical" if score >= 9 else "high" if score >= 7 else "medium" if score >= 4 else "low"


@dataclass(frozen=True, slots=True)
class RawFinding:
    purl: str
    vuln_id: str
    severity: str
    fixed_version: str | None = None
    aliases: tuple[str, ...] = ()
    link: str | None = None
    kev: bool = False
    """The tool itself says known-exploited (Grype's ``knownExploited``)."""


@dataclass(frozen=True, slots=True)
class ToolReport:
    findings: list[RawFinding]
    revision: str
    """The tool's vulnerability data revision (DB build, schema, version)."""
    tool_version: str = ""
