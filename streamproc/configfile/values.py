"""Typing the values of registry keys: TOML values into the strings the readers parse (the
environment's form; :mod:`streamproc.configfile.typed` types those), and typed values back
into TOML for display. Each failure is a reason naming what was expected and what was found."""

from __future__ import annotations

import json
import math
import re
from typing import Any

from streamproc.configfile.registry import Key
from streamproc.configfile.typed import EXPECTED, ValueProblem, check

REDACTED = "<redacted>"


def _toml_kind(value: object) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a float"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "a table"
    return f"a {type(value).__name__}"  # dates and times


def _wrong(key: Key, value: object) -> ValueProblem:
    return ValueProblem(f"expected {EXPECTED[key.type]}, got {_toml_kind(value)} {value!r}")


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def from_toml(key: Key, value: object) -> str:
    """A TOML value as the environment string the key's reader parses."""
    typed: Any
    if key.type == "str":
        if not isinstance(value, str):
            raise _wrong(key, value)
        typed = value
    elif key.type == "int":
        if not isinstance(value, int) or isinstance(value, bool):
            raise _wrong(key, value)
        typed = value
    elif key.type == "float":
        if not _is_number(value) or not math.isfinite(value):  # type: ignore[arg-type]  # _is_number narrows at runtime (no TypeGuard over object here)
            raise _wrong(key, value)
        typed = value
    elif key.type == "bool":
        if not isinstance(value, bool):
            raise _wrong(key, value)
        typed = value
    elif key.type == "list[str]":
        items = value.split(",") if isinstance(value, str) else value
        if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
            raise _wrong(key, value)
        if isinstance(value, list) and any("," in i for i in items):
            raise ValueProblem("an item may not contain a comma")
        typed = [i.strip() for i in items if i.strip()]
    else:  # list[float]
        if not isinstance(value, list) or not all(_is_number(i) for i in value):
            raise _wrong(key, value)
        typed = value
    check(key, typed)
    return to_env(key, typed)


def to_env(key: Key, typed: object) -> str:
    if isinstance(typed, bool):
        return "true" if typed else "false"
    if isinstance(typed, list):
        return ",".join(str(i) for i in typed)
    return str(typed)


_USERINFO = re.compile(r"(?P<scheme>[a-z][a-z0-9+.-]*://)(?P<user>[^:/@,]*):[^@/,]*@", re.I)


def redact_urls(text: str) -> str:
    """``nats://user:secret@host`` → ``nats://user:<redacted>@host`` (URLs carry passwords)."""
    return _USERINFO.sub(lambda m: f"{m['scheme']}{m['user']}:{REDACTED}@", text)


def toml_literal(value: object) -> str:
    """A typed value written as TOML (strings as JSON-escaped basic strings, which TOML reads
    the same way)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_literal(v) for v in value) + "]"
    return json.dumps(str(value), ensure_ascii=False)


def display(key: Key, typed: object) -> str:
    """A value for ``config show``: secrets redacted, passwords in URLs too."""
    if key.secret:
        return json.dumps(REDACTED)
    return redact_urls(toml_literal(typed))
