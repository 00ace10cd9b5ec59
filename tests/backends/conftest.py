from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

STANDIN = Path(__file__).parent / "standin.py"
DATA = Path(__file__).parent.parent / "data" / "scanners"


def install_standins(bin_dir: Path) -> Path:
    """Executables named grype, trivy and osv-scanner in ``bin_dir`` that run the stand-in."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    for tool in ("grype", "trivy", "osv-scanner"):
        exe = bin_dir / tool
        exe.write_text(
            f"#!{sys.executable}\nimport sys\nsys.path.insert(0, {str(STANDIN.parent)!r})\n"
            f"import standin\nsys.exit(standin.main({tool!r}))\n"
        )
        exe.chmod(0o755)
    return bin_dir


@pytest.fixture
def standins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The stand-ins first on a temporary PATH."""
    bin_dir = install_standins(tmp_path / "bin")
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("STANDIN_LOG", str(tmp_path / "calls.jsonl"))
    return bin_dir
