"""docs/changing.md's recipes name the files a change touches: every one must exist.

The recipes are only as good as their paths. When a module moves, this fails and names the
recipe's stale paths, instead of leaving the page to send the next change to files that are
gone. Beside the paths, the names the page places in a file (`` `ROLES` in
`streamproc/roles.py` ``) must be defined there, and a dotted module name
(`streamproc.config.environment`) must resolve.
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.test_docs import _defined

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "changing.md"

TOPS = ("streamproc", "tests", "docs", "schemas", "deploy", "bench")
ROOT_FILES = ("pyproject.toml", "Makefile", "README.md")
SPAN = re.compile(r"`([^`\n]+)`")
_TOP = "|".join(TOPS)
_FILES = "|".join(map(re.escape, ROOT_FILES))
PATH = re.compile(rf"^(?:(?:{_TOP})/[\w./@<>*-]*|{_FILES})$")
"""A repository path: under one of the top directories, or a file at the root."""
DOTTED = re.compile(r"^streamproc(?:\.\w+)+$")
PLACED = re.compile(r"`([A-Za-z_][\w.]*)`\s+in\s+`((?:streamproc|tests)/[\w/]+\.py)`")
"""A name the page says a Python file defines: `` `KINDS` in `streamproc/events/catalog.py` ``."""


def repository_paths(text: str) -> list[str]:
    """The repository paths the page names in code spans, commands' arguments included."""
    return [
        word.rstrip(".") for span in SPAN.findall(text) for word in span.split() if PATH.match(word)
    ]


def missing_path(path: str) -> bool:
    if "<" in path:  # a placeholder (`streamproc/<role>/role.py`): its fixed part must exist
        return not (ROOT / path.split("<", 1)[0]).exists()
    if "*" in path:
        return not any(ROOT.glob(path))
    return not (ROOT / path).exists()


def _module_file(name: str) -> Path | None:
    base = ROOT / Path(*name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.exists():
            return candidate
    return None


def missing_dotted(name: str) -> bool:
    """Neither a module (`streamproc.gateway.api.openapi`) nor a name a module defines
    (`streamproc.config.environment`)."""
    if _module_file(name) is not None:
        return False
    module, _, attr = name.rpartition(".")
    path = _module_file(module)
    return path is None or attr not in _defined(path)


def misplaced(text: str) -> list[str]:
    """Names the page places in a Python file that the file does not define (every part of
    `Images._removed`)."""
    out = []
    for name, path in PLACED.findall(text):
        file = ROOT / path
        if not file.exists() or not set(name.split(".")) <= _defined(file):
            out.append(f"{name} in {path}")
    return out


def test_every_path_and_name_the_recipes_give_exists() -> None:
    text = DOC.read_text()
    paths = repository_paths(text)
    dotted = [s for s in SPAN.findall(text) if DOTTED.match(s)]
    stale = [
        *(p for p in paths if missing_path(p)),
        *(d for d in dotted if missing_dotted(d)),
        *misplaced(text),
    ]
    assert not stale, "docs/changing.md names what is not in the repository: " + ", ".join(stale)
    assert len(paths) >= 40 and len(PLACED.findall(text)) >= 10  # the patterns read the page


def test_the_checks_catch_a_moved_file_or_name() -> None:
    text = (
        "`streamproc/roles.py`, `make x --out docs/gone.md`, `streamproc/<role>/role.py`; "
        "`ROLES` in `streamproc/roles.py`, `GONE` in `streamproc/roles.py`, "
        "`ROLES` in `streamproc/gone.py`"
    )
    assert repository_paths(text) == [
        "streamproc/roles.py",
        "docs/gone.md",
        "streamproc/<role>/role.py",
        "streamproc/roles.py",
        "streamproc/roles.py",
        "streamproc/gone.py",
    ]
    assert [p for p in repository_paths(text) if missing_path(p)] == [
        "docs/gone.md",
        "streamproc/gone.py",
    ]
    assert misplaced(text) == ["GONE in streamproc/roles.py", "ROLES in streamproc/gone.py"]
    assert missing_path("streamproc/nowhere/<role>/role.py")
    assert missing_dotted("streamproc.config.gone")
    assert not missing_dotted("streamproc.config.Configuration")
    assert not missing_dotted("streamproc.gateway.api.openapi")
