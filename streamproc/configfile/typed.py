"""The one decode of settings text: each key's environment string (the form the config file's
values are merged into) typed, checked against its choices and bounds, and every section of
the registry built into :class:`~streamproc.configfile.sections.Sections`. The loader decodes
a process's settings with it once at start, ``config check`` and ``config show`` with the same
functions; a true/false word is parsed here alone (:func:`flag`)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import msgspec

from streamproc.configfile.registry import KEYS, RENAMED_ENV, Key
from streamproc.configfile.sections import Sections

TRUE = frozenset({"1", "true", "yes", "on"})
FALSE = frozenset({"0", "false", "no", "off"})
"""The words of a true/false setting, for every reader (``config check`` included)."""


def flag(text: str) -> bool | None:
    """A true/false setting's value; None for a word that is neither (the caller says how
    it refuses that)."""
    word = text.strip().lower()
    return True if word in TRUE else False if word in FALSE else None


class ValueProblem(ValueError):
    """A value does not fit its key; the message is the reason."""


EXPECTED = {
    "str": "a string",
    "int": "an integer",
    "float": "a number",
    "bool": "true or false",
    "list[str]": "an array of strings (or one comma-separated string)",
    "list[float]": "an array of numbers",
}


def from_env(key: Key, text: str) -> object:
    """An environment string as the key's typed value."""
    text = text.strip()
    typed: Any
    try:
        if key.type == "int":
            typed = int(text)
        elif key.type == "float":
            typed = float(text)
            if not math.isfinite(typed):
                raise ValueError
        elif key.type == "bool":
            typed = flag(text)
            if typed is None:
                raise ValueError
        elif key.type == "list[str]":
            typed = [i.strip() for i in text.split(",") if i.strip()]
        elif key.type == "list[float]":
            typed = [float(i) for i in text.split(",") if i.strip()]
        else:
            typed = text
    except ValueError:
        extra = " (1/0, true/false, yes/no, on/off)" if key.type == "bool" else ""
        raise ValueProblem(f"expected {EXPECTED[key.type]}{extra}, got {text!r}") from None
    check(key, typed)
    return typed


def check(key: Key, typed: object) -> None:
    """The key's choices and bounds."""
    items = typed if isinstance(typed, list) else [typed]
    for item in items:
        if key.choices and str(item) not in key.choices:
            raise ValueProblem(f"{item!r} is not one of {', '.join(key.choices)}")
        if isinstance(item, bool) or not isinstance(item, int | float):
            continue
        if key.minimum is not None and item < key.minimum:
            raise ValueProblem(f"{item} is below the minimum {_num(key.minimum)}")
        if key.maximum is not None and item > key.maximum:
            raise ValueProblem(f"{item} is above the maximum {_num(key.maximum)}")


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


def field_name(section: str) -> str:
    """``scanner.osv-scanner`` → ``scanner_osv_scanner``: the section's field of
    :class:`Sections`."""
    return section.replace(".", "_").replace("-", "_")


class SectionProblems(ValueError):
    """Settings that do not fit their keys: each names the key and why (the loader labels
    each with where its value came from)."""

    def __init__(self, problems: list[tuple[Key, str]]) -> None:
        self.problems = problems
        lines = "\n".join(f"  {key.path} ({key.env}): {why}" for key, why in problems)
        super().__init__(f"{len(problems)} problem(s):\n{lines}")


def _typed(values: Mapping[str, str]) -> tuple[dict[str, dict[str, object]], list[tuple[Key, str]]]:
    """Each set key's text typed once, by section, and the keys whose text does not fit
    (with any variable of an earlier version that was renamed: it would be ignored silently
    otherwise)."""
    raw: dict[str, dict[str, object]] = {}
    out = []
    for key in KEYS:
        if values.get(key.env):
            try:
                typed = from_env(key, values[key.env])
            except ValueProblem as exc:
                out.append((key, str(exc)))
            else:
                raw.setdefault(field_name(key.section), {})[key.name] = typed
    for old, new in RENAMED_ENV.items():
        if values.get(old, "").strip():
            key = next(k for k in KEYS if k.env == new)
            out.append((key, f"{old} is now {new} (docs/configuration.md); set that instead"))
    return raw, out


def problems(values: Mapping[str, str]) -> list[tuple[Key, str]]:
    """Every set key whose text does not fit it, and every renamed variable still set."""
    return _typed(values)[1]


def decode(values: Mapping[str, str]) -> Sections:
    """``values`` (environment name → text; empty counts as unset) as :class:`Sections`;
    :class:`SectionProblems` names every key that does not fit."""
    raw, found = _typed(values)
    if found:
        raise SectionProblems(found)
    return msgspec.convert(raw, Sections)
