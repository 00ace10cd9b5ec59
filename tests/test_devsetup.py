"""``up --demo`` trusts a development token issuer (its private key in the data directory)
and bearer tokens: it listens on loopback only, whatever the environment says (L10)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from streamproc.config import ConfigError, Settings
from streamproc.devsetup import refuse_exposed_demo


def up_demo(data: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "streamproc.cli", "up", "--demo", "--data-dir", str(data),
         "--nats-port", "0", "--http-port", "0"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "NATS_URL": "", "STREAMPROC_GATEWAY_CONFIG": "", **env},
    )  # fmt: skip


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.1.2.3", "scheduler.example.com"])
def test_up_demo_refuses_a_bind_beyond_loopback(tmp_path: Path, host: str) -> None:
    r = up_demo(tmp_path / "data", STREAMPROC_HTTP_HOST=host)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert r.stderr.strip() == (
        f"streamproc: --demo listens on loopback only (it trusts a development token issuer "
        f"and bearer tokens), not STREAMPROC_HTTP_HOST={host}: unset it, or run without "
        f"--demo with a gateway configuration of your own"
    )
    assert r.stdout == ""
    assert not (tmp_path / "data" / "dev").exists(), "no development key was written"
    assert not (tmp_path / "data" / "nats").exists(), "nothing started"


def test_loopback_addresses_pass() -> None:
    for host in ("127.0.0.1", "127.0.0.2", "::1", "localhost"):
        refuse_exposed_demo(Settings(http_host=host, node_id="n"))
    with pytest.raises(ConfigError, match=r"STREAMPROC_HTTP_HOST=0\.0\.0\.0:"):
        refuse_exposed_demo(Settings(http_host="0.0.0.0", node_id="n"))
    refuse_exposed_demo(Settings(ops_host="0.0.0.0", node_id="n"))  # no ops listener
    with pytest.raises(ConfigError, match=r"STREAMPROC_OPS_HOST=0\.0\.0\.0:"):
        refuse_exposed_demo(Settings(ops_host="0.0.0.0", ops_port=8479, node_id="n"))
