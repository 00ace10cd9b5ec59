"""SBOMs as a standard generator makes them, at test time: ``cyclonedx-py environment`` over
a throwaway virtual environment.

Packages beyond what ``venv`` brings come from the package index (PyPI) through this
environment's pip and its cache: a fresh machine has Python, make and PyPI, and
``make install`` has just used the same index, so a test that needs old, known-vulnerable
versions installs them at test time rather than shipping them (the first run downloads a few
hundred KB and builds PyYAML 5.3.1 from its sdist in about 3 s; later runs take the cached
wheel). Nothing is installed into the project's own environment.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

GENERATOR = [sys.executable, "-m", "cyclonedx_py", "environment"]


def _run(argv: list[str], timeout: float) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{' '.join(argv)} failed:\n{done.stdout}\n{done.stderr}"


def generated_sbom(
    tmp: Path, name: str = "app", packages: Sequence[str] = (), *, with_pip: bool = True
) -> Path:
    """A fresh venv ``name`` — with ensurepip's pip and setuptools (setuptools 65.x: affected
    by GHSA-cx63-2mw6-8hw5), or bare — holding ``packages`` (pinned requirements, installed
    without their dependencies), and its SBOM as cyclonedx-py writes it."""
    env = tmp / f"{name}-venv"
    _run([sys.executable, "-m", "venv", *([] if with_pip else ["--without-pip"]), str(env)], 120)
    python = env / "bin" / "python"
    if packages:
        _run([sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet",
              "--disable-pip-version-check", "--no-deps", *packages], 600)  # fmt: skip
    out = tmp / f"{name}.cdx.json"
    _run([*GENERATOR, str(python), "-o", str(out)], 120)
    return out


def purls(sbom: Path) -> list[str]:
    return [c["purl"] for c in json.loads(sbom.read_text())["components"]]


def has_usage_data(sbom: Path) -> bool:
    """CycloneDX carries usage as a component's ``scope``; a generator's plain SBOM has none."""
    return any("scope" in c for c in json.loads(sbom.read_text())["components"])
