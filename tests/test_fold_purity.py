"""The "folds are pure" contract is derived, not kept by hand: its module list in
pyproject.toml is exactly the modules of the projections the roles fold (``ROLES``), so a
projection added to a role is checked by import-linter from its first commit. No fold
module reaches the event loop (``asyncio``) either, directly or through another module:
background work over folded state (the impact index's warming) lives outside the folds. Nor
does any read a setting: what a fold or its store is configured with reaches it through its
constructor, read by the code that starts the role."""

from __future__ import annotations

import tomllib
import typing
from collections.abc import Callable
from pathlib import Path

import grimp

from streamproc.roles import ROLES
from streamproc.runtime.projection import Projection
from streamproc.runtime.reactor import Configured

PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"
RUNTIME = {"streamproc.runtime.projection", "streamproc.projections"}
"""The fold runtime itself and the helpers folds share: held to the same rule."""


def _folded_class(make: Callable[[], Projection] | Configured) -> type:
    """The projection class a role's factory makes: the class itself, or the return type of
    a function that builds it with the role's settings."""
    if isinstance(make, Configured):
        return _folded_class(make.make)  # type: ignore[arg-type]  # takes the configuration; only its return type is read
    if isinstance(make, type):
        return make
    made = typing.get_type_hints(make)["return"]
    assert isinstance(made, type) and issubclass(made, Projection), make
    return made


def fold_modules() -> set[str]:
    folded = {_folded_class(p).__module__ for spec in ROLES.values() for p in spec.projections}
    return RUNTIME | {m for m in folded if not m.startswith(tuple(f"{r}." for r in RUNTIME))}


def _contract() -> dict[str, list[str]]:
    config = tomllib.loads(PYPROJECT.read_text())["tool"]["importlinter"]["contracts"]
    return next(c for c in config if c["id"] == "folds")


def test_the_contract_lists_every_module_a_role_folds_in() -> None:
    assert set(_contract()["source_modules"]) == fold_modules()


def test_no_fold_module_reaches_the_runtime_even_through_others() -> None:
    """What lint-imports checks, asked of the import graph here too, so this test fails on
    its own if the contract's list or its forbidden modules shrink."""
    graph = grimp.build_graph("streamproc")
    forbidden = set(_contract()["forbidden_modules"])
    assert {
        "streamproc.bus",
        "streamproc.runtime.reactor",
        "streamproc.runtime.projector",
    } <= forbidden
    chains = {
        (m, bad): graph.find_shortest_chain(importer=m, imported=bad, as_packages=True)
        for m in fold_modules()
        for bad in forbidden
    }
    assert {k: c for k, c in chains.items() if c} == {}


def test_no_fold_module_reaches_asyncio_even_through_others() -> None:
    """A fold runs inside a batch, not on the event loop: it starts no task and awaits
    nothing. Checked on the import graph with external packages, since import-linter's
    forbidden contract here names only the project's own modules. Built without grimp's
    cache: the cache keeps one file of modification times per package for every kind of
    graph, so after a build without external packages it would serve this kind stale."""
    graph = grimp.build_graph("streamproc", include_external_packages=True, cache_dir=None)
    assert "asyncio" in graph.modules
    chains = {
        m: graph.find_shortest_chain(importer=m, imported="asyncio", as_packages=True)
        for m in fold_modules()
    }
    assert {m: c for m, c in chains.items() if c} == {}


def test_no_fold_module_reads_a_setting_even_through_others() -> None:
    """Settings (the environment, the config file) are read where a role is started, and
    reach folds and stores as constructor arguments: a fold's result depends on its events
    and its arguments alone."""
    graph = grimp.build_graph("streamproc", cache_dir=None)
    readers = {"streamproc.config", "streamproc.configfile"}
    chains = {
        (m, bad): graph.find_shortest_chain(importer=m, imported=bad, as_packages=True)
        for m in fold_modules()
        for bad in readers
    }
    assert {k: c for k, c in chains.items() if c} == {}
