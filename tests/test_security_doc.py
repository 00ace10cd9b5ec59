"""docs/security.md names the test behind every line: each one it names exists."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "security.md"
REF = re.compile(r"`(tests/[\w/]+\.py)?::(test_\w+)`")


def test_every_test_the_threat_model_names_exists() -> None:
    named: list[tuple[str, str]] = []
    current = ""
    for path, name in REF.findall(DOC.read_text()):
        current = path or current  # `::name` continues the file named last
        assert current, name
        named.append((current, name))
    assert len(named) >= 30
    for path, name in named:
        tree = ast.parse((ROOT / path).read_text())
        defined = {
            n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
        }
        assert name in defined, f"{path}::{name} named in docs/security.md does not exist"
