"""Imports flow one way (docs/architecture.md, "Layers"): what `lint-imports` does not check.

import-linter checks the layer order and the contracts in pyproject.toml; these tests check
the rest of the rule: no import inside a function to dodge a cycle (only an optional library
may be deferred, saying so), and no cycle in the imports, counting those only the type checker
reads (``if TYPE_CHECKING:``): a cycle hidden from the interpreter is still one."""

from __future__ import annotations

import ast
from collections.abc import Collection
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "streamproc"


def _module(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _type_checking_only(tree: ast.Module) -> set[int]:
    return {
        id(node)
        for block in ast.walk(tree)
        if isinstance(block, ast.If) and "TYPE_CHECKING" in ast.unparse(block.test)
        for node in ast.walk(block)
    }


def _imports(
    tree: ast.Module, type_checking: bool = False
) -> list[tuple[ast.Import | ast.ImportFrom, ast.AST | None]]:
    """Every import that runs — and with ``type_checking`` those under ``if TYPE_CHECKING:``
    too — with the function it sits in (None: module level)."""
    skip = set() if type_checking else _type_checking_only(tree)
    out: list[tuple[ast.Import | ast.ImportFrom, ast.AST | None]] = []

    def visit(node: ast.AST, func: ast.AST | None) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import | ast.ImportFrom) and id(child) not in skip:
                out.append((child, func))
            inner = child if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef) else func
            visit(child, inner)

    visit(tree, None)
    return out


def _targets(
    node: ast.Import | ast.ImportFrom, module: str, is_package: bool, modules: Collection[str]
) -> list[str]:
    """The modules an import runs: ``from pkg import mod`` is ``pkg.mod`` (Python imports
    a package before its modules, so that is no edge back to ``pkg``)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    base = node.module or ""
    if node.level:
        parts = module.split(".") if is_package else module.split(".")[:-1]
        parts = parts[: len(parts) - node.level + 1]
        base = ".".join([*parts, node.module] if node.module else parts)
    return [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]


def _sources() -> dict[str, tuple[Path, ast.Module]]:
    return {_module(p): (p, ast.parse(p.read_text())) for p in sorted(PACKAGE.rglob("*.py"))}


ENTRY = "streamproc.__main__"
"""The console script's module defers the command line's import on purpose, to catch a
Ctrl-C during it (its docstring says why); no other module may."""


def test_no_streamproc_module_is_imported_inside_a_function() -> None:
    local = [
        f"{path.relative_to(PACKAGE.parent)}:{node.lineno}: {ast.unparse(node)}"
        for module, (path, tree) in _sources().items()
        for node, func in _imports(tree)
        if func is not None
        and module != ENTRY
        and any(
            t.split(".")[0] == "streamproc"
            for t in _targets(node, module, path.name == "__init__.py", ())
        )
    ]
    assert local == [], "import it at module level (a cycle? see docs/architecture.md):\n" + (
        "\n".join(local)
    )


def test_a_library_is_imported_inside_a_function_only_when_deferred_on_purpose() -> None:
    """An optional (or heavy) library may wait until it is needed; the comment says so."""
    unexplained = []
    for path, tree in _sources().values():
        lines = path.read_text().splitlines()
        tries = [t for t in ast.walk(tree) if isinstance(t, ast.Try)]
        for node, func in _imports(tree):
            if func is None:
                continue
            # the comment is on the import, the line above it, or the `try:` around it
            said = {node.lineno, node.lineno - 1}
            said |= {t.lineno for t in tries if t.lineno < node.lineno <= t.body[-1].end_lineno}
            if not any("# deferred" in lines[n - 1] for n in said):
                unexplained.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}")
    assert unexplained == [], "say why it is deferred (# deferred: …): " + ", ".join(unexplained)


def test_the_imports_have_no_cycle_not_even_for_the_type_checker() -> None:
    sources = _sources()
    graph: dict[str, set[str]] = {m: set() for m in sources}
    for module, (path, tree) in sources.items():
        for node, _ in _imports(tree, type_checking=True):
            for target in _targets(node, module, path.name == "__init__.py", sources):
                while target and target not in sources:
                    target = target.rpartition(".")[0]
                if target and target != module:
                    graph[module].add(target)
    done: set[str] = set()
    cycles: list[list[str]] = []

    def walk(module: str, path: list[str]) -> None:
        if module in path:
            cycles.append([*path[path.index(module) :], module])
            return
        if module in done:
            return
        for target in sorted(graph[module]):
            walk(target, [*path, module])
        done.add(module)

    for module in sorted(graph):
        walk(module, [])
    assert cycles == [], "\n".join(" -> ".join(c) for c in cycles[:5])
