"""The demo's data ships with the package: an installed wheel has no tests/ to read from."""

from __future__ import annotations

import tomllib
from pathlib import Path

import streamproc
from streamproc.scanner import demo

PACKAGE = Path(streamproc.__file__).resolve().parent
ROOT = PACKAGE.parent


def demo_files() -> list[Path]:
    return sorted(p for p in demo.DATA.rglob("*") if p.is_file())


def test_the_demo_data_is_inside_the_package_and_complete() -> None:
    assert demo.DATA.is_relative_to(PACKAGE) and "tests" not in demo.DATA.relative_to(ROOT).parts
    wanted = [demo.DATA / "osv" / f"{name}.json" for name in demo.BASELINE]
    guide = demo.render_guide("http://gw", "http://sc", Path("run/osv"), "demo", _Settings())
    wanted += [Path(w) for w in guide.split() if w.startswith(str(demo.DATA))]
    wanted += [demo.DATA / "kev.json", demo.DATA / "osv" / "debian-sources.json"]
    assert len(list((demo.DATA / "sboms").glob("*.json"))) == 4
    for path in wanted:
        assert path.is_file() and not path.is_symlink(), path


def test_pyproject_declares_every_demo_file_as_package_data() -> None:
    doc = tomllib.loads((ROOT / "pyproject.toml").read_text())
    patterns = doc["tool"]["setuptools"]["package-data"]["streamproc"]
    declared = {p for pattern in patterns for p in PACKAGE.glob(pattern)}
    missing = [str(p.relative_to(PACKAGE)) for p in demo_files() if p not in declared]
    assert not missing, f"not declared as package data in pyproject.toml: {missing}"


class _Settings:
    data_dir = Path("data")
    nats_url = None
    prefix = "scheduler"
