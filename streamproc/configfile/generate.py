"""Writes :mod:`streamproc.configfile.sections` from the registry's :data:`KEYS`: one msgspec
Struct per section, one typed field per key (its default, its choices as a ``Literal``, its
bounds as ``msgspec.Meta``), and :class:`Sections` with a field per section. Generated, so the
types sit below every role (mypy sees them) and cannot drift from the registry
(``tests/configfile/test_sections.py``). ``make schemas`` runs it."""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from pathlib import Path

from streamproc.configfile.registry import KEYS, SECTIONS, Key
from streamproc.configfile.typed import field_name

TARGET = Path(__file__).with_name("sections.py")

_BASE = {
    "str": "str",
    "int": "int",
    "float": "float",
    "bool": "bool",
    "list[str]": "str",
    "list[float]": "float",
}

HEADER = '''"""Every setting as one typed object: a Struct per section, a field per key.

Generated from ``streamproc/configfile/registry.py`` by ``make schemas``
(``python -m streamproc.configfile.generate``); do not edit. The process's one
:class:`streamproc.config.Configuration` decodes the config file and the environment into
:class:`Sections` once, at start (:mod:`streamproc.configfile.typed`).
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec


def _masked(struct: msgspec.Struct, secrets: tuple[str, ...]) -> str:
    """A section's repr with its secrets' values left out, so that logging or printing the
    settings never shows a password, a key or a token."""
    shown = (
        f"{f}=<set>" if f in secrets and getattr(struct, f) is not None
        else f"{f}={getattr(struct, f)!r}"
        for f in struct.__struct_fields__
    )  # fmt: skip
    return f"{type(struct).__name__}({', '.join(shown)})"

'''


def class_name(section: str) -> str:
    """``scanner.osv-scanner`` → ``ScannerOsvScanner``."""
    words = section.replace(".", " ").replace("-", " ").replace("_", " ").split()
    return "".join(w.capitalize() for w in words)


def _num(x: float, type_: str) -> str:
    return repr(float(x)) if type_ == "float" or not float(x).is_integer() else str(int(x))


def annotation(key: Key) -> str:
    """The key's Python type: choices as a ``Literal``, bounds as ``msgspec.Meta``, lists as
    tuples (a frozen Struct's defaults are immutable), ``| None`` when it has no default."""
    base = _BASE[key.type]
    if key.choices:
        base = "Literal[" + ", ".join(json.dumps(c) for c in key.choices) + "]"
    meta = []
    if key.minimum is not None:
        meta.append(f"ge={_num(key.minimum, _BASE[key.type])}")
    if key.maximum is not None:
        meta.append(f"le={_num(key.maximum, _BASE[key.type])}")
    if meta and not key.choices:
        base = f"Annotated[{base}, msgspec.Meta({', '.join(meta)})]"
    if key.type.startswith("list["):
        base = f"tuple[{base}, ...]"
    return f"{base} | None" if key.default is None else base


def default(key: Key) -> str:
    if key.default is None:
        return "None"
    if isinstance(key.default, list):
        items = ", ".join(json.dumps(i) for i in key.default)
        return f"({items},)" if len(key.default) == 1 else f"({items})"
    if key.type == "float":
        return repr(float(key.default))  # type: ignore[arg-type]  # a float key's default is a number
    return json.dumps(key.default) if isinstance(key.default, str) else repr(key.default)


def render() -> str:
    out = [HEADER]
    for section, meaning in SECTIONS.items():
        out.append(f"\nclass {class_name(section)}(msgspec.Struct, frozen=True, kw_only=True):")
        doc = textwrap.wrap(f"[{section}]: {meaning}.", 90, break_on_hyphens=False)
        out.append('    """' + "\n    ".join(doc) + ('\n    """\n' if len(doc) > 1 else '"""\n'))
        for key in (k for k in KEYS if k.section == section):
            comment = f"{key.env}: {key.description}"
            for line in textwrap.wrap(comment, 92, break_on_hyphens=False):
                out.append(f"    # {line}")
            out.append(f"    {key.name}: {annotation(key)} = {default(key)}")
        secrets = [k.name for k in KEYS if k.section == section and k.secret]
        if secrets:
            names = ", ".join(json.dumps(n) for n in secrets) + ("," if len(secrets) == 1 else "")
            out.append("\n    def __repr__(self) -> str:")
            out.append(f"        return _masked(self, ({names}))")
        out.append("\n")
    out.append("\nclass Sections(msgspec.Struct, frozen=True, kw_only=True):")
    out.append('    """Every section of the registry, typed."""\n')
    for section in SECTIONS:
        name = class_name(section)
        out.append(f"    {field_name(section)}: {name} = msgspec.field(default_factory={name})")
    return "\n".join(out).replace("\n\n\n\n", "\n\n\n") + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--out", type=Path, default=TARGET)
    args = p.parse_args(argv)
    args.out.write_text(render())
    print(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
