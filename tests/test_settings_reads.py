"""Settings are read once, at start, by :mod:`streamproc.configfile` (into the process's
:class:`~streamproc.config.Configuration`); every other module takes them from there. This
walks the syntax tree of every module of the package and refuses any other read of the
process environment."""

from __future__ import annotations

import ast
from pathlib import Path

import streamproc
from streamproc import config

PACKAGE = Path(streamproc.__file__).parent
READER = PACKAGE / "configfile"

ALLOWED: dict[str, str] = {
    # Not a setting: a fault-injection hook of the crash tests, read by the child process a
    # test starts at the crash point it names (it is in no registry, docs or config file).
    "crashpoints.py": "os.environ",
    # A write, not a read: `up --demo` selects the development auth for the commands this
    # process starts and the user's own shell commands it prints; its own roles get it from
    # the configuration it returns.
    "devsetup.py": "os.environ",
}
"""Module (relative to the package) → the one access it may keep, and why."""


def _reads(tree: ast.AST) -> list[tuple[int, str]]:
    """Each ``os.environ`` / ``os.getenv`` / ``environ`` / ``getenv`` / ``environment()``."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            if node.value.id == "os" and node.attr in ("environ", "getenv", "environb"):
                found.append((node.lineno, f"os.{node.attr}"))
        elif isinstance(node, ast.ImportFrom) and node.module in ("os", "streamproc.config"):
            for alias in node.names:
                if alias.name in ("environ", "getenv", "environb", "environment"):
                    found.append((node.lineno, f"from {node.module} import {alias.name}"))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            if node.func.id in ("environment", "getenv"):
                found.append((node.lineno, f"{node.func.id}()"))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "environment"
        ):
            found.append((node.lineno, ".environment()"))
    return found


def offenders(root: Path = PACKAGE) -> dict[str, list[tuple[int, str]]]:
    out = {}
    for path in sorted(root.rglob("*.py")):
        if path.is_relative_to(READER):
            continue
        name = str(path.relative_to(root))
        reads = [
            r for r in _reads(ast.parse(path.read_text(), str(path))) if r[1] != ALLOWED.get(name)
        ]
        if reads:
            out[name] = reads
    return out


def test_only_configfile_reads_the_environment() -> None:
    found = offenders()
    assert not found, (
        "read settings from the process's Configuration (settings.configuration, "
        "ctx.settings.configuration, cliargs.configuration(args)), not the environment:\n"
        + "\n".join(
            f"  streamproc/{m}:{line}: {what}" for m, rs in found.items() for line, what in rs
        )
    )


def test_every_allowed_module_still_needs_its_exception() -> None:
    """An exception nobody uses any more is removed, so the list stays the true minimum."""
    for name, what in ALLOWED.items():
        tree = ast.parse((PACKAGE / name).read_text())
        assert any(w == what for _, w in _reads(tree)), f"{name}: {what} no longer used"


def test_the_walk_finds_each_form_of_read(tmp_path: Path) -> None:
    """Each form the package used before its settings were read once is caught (on that tree
    this test named 27 modules), so the test cannot pass vacuously."""
    (tmp_path / "a.py").write_text("import os\nx = os.environ.get('STREAMPROC_X')\n")
    (tmp_path / "b.py").write_text("import os\nx = os.getenv('STREAMPROC_X')\n")
    (tmp_path / "c.py").write_text(
        "from streamproc.config import environment\nx = environment().get('X')\n"
    )
    (tmp_path / "d.py").write_text("from os import environ\nx = environ['X']\n")
    (tmp_path / "e.py").write_text("from streamproc import config\nx = config.environment()\n")
    (tmp_path / "ok.py").write_text("def f(env: dict[str, str]) -> str:\n    return env['X']\n")
    assert sorted(offenders(tmp_path)) == ["a.py", "b.py", "c.py", "d.py", "e.py"]


def test_a_printed_configuration_shows_no_secret() -> None:
    """Settings carry the configuration into logs and tracebacks: its values stay out."""
    settings = config.load(configuration=config.Configuration(values={"STREAMPROC_X": "hunter2"}))
    assert "hunter2" not in repr(settings) and "hunter2" not in str(settings.configuration)
