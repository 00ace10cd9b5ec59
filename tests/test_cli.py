"""The command line as a user runs it: real processes, real server, real state directories."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from streamproc.bus.publisher import Publisher
from streamproc.natsd.cluster import free_ports
from streamproc.natsd.server import EmbeddedNats
from tests.helpers import publish_samples
from tests.samples import sample_event


def cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "streamproc.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "NATS_URL": ""},
    )


def test_up_starts_everything_and_stops_cleanly_on_ctrl_c(tmp_path: Path) -> None:
    nats_port, http_port, ops_port = free_ports("127.0.0.1", 3)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "streamproc.cli",
            "up",
            "--data-dir",
            str(tmp_path / "data"),
            "--nats-port",
            str(nats_port),
            "--http-port",
            str(http_port),
            "--ops-port",
            str(ops_port),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    lines = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        lines.append(line)
        if "Press Ctrl-C" in line or not line:
            break
    out = "".join(lines)
    assert f"nats://127.0.0.1:{nats_port}" in out
    assert f"http://127.0.0.1:{http_port}/readyz" in out
    assert f"metrics      http://127.0.0.1:{ops_port}/metrics" in out, "not on the API port"
    proc.send_signal(signal.SIGINT)
    rest, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "stopped cleanly" in rest
    assert (tmp_path / "data" / "nats" / "jetstream").is_dir()
    assert (tmp_path / "data" / "state" / "activity" / "CURRENT").exists()


def test_up_on_a_taken_http_port_is_a_clear_error_before_anything_starts(tmp_path: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as busy:
        port = busy.getsockname()[1]
        r = cli("up", "--data-dir", str(tmp_path), "--http-port", str(port), "--nats-port", "0")
    assert r.returncode == 2, r.stderr
    assert f"cannot listen on 127.0.0.1:{port}: Address already in use" in r.stderr
    assert "Traceback" not in r.stderr
    assert not (tmp_path / "nats" / "jetstream").exists(), "refused before the server started"
    assert not (tmp_path / "nats" / "owner.json").exists(), "and gave the store up again"


def test_streams_apply_against_an_unreachable_server_fails_clearly() -> None:
    r = cli("streams", "apply", "--nats-url", "nats://127.0.0.1:1", timeout=30)
    assert r.returncode == 2
    assert "cannot connect to NATS at nats://127.0.0.1:1" in r.stderr


def test_output_into_a_closed_pipe_ends_quietly() -> None:
    """`streamproc config show | head -1`: the reader has gone; no BrokenPipe traceback."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # every write now fails with EPIPE, as after head's exit
    try:
        show = subprocess.run(
            [sys.executable, "-m", "streamproc.cli", "config", "show"],
            stdout=write_end,
            stderr=subprocess.PIPE,
            env={**os.environ, "NATS_URL": ""},
            timeout=60,
        )
    finally:
        os.close(write_end)
    assert show.returncode == 141 and b"Traceback" not in show.stderr, show.stderr.decode()


def test_unknown_role_and_bad_prefix_are_refused(tmp_path: Path) -> None:
    r = cli("replay", "--role", "nope", "--data-dir", str(tmp_path))
    assert r.returncode == 2
    assert "invalid choice: 'nope'" in r.stderr
    r = cli("replay", "--role", "activity", "--data-dir", str(tmp_path), "--prefix", "Bad.Prefix")
    assert r.returncode == 2
    assert "prefix 'Bad.Prefix'" in r.stderr


async def test_replay_rebuilds_swaps_in_and_refuses_a_running_role(
    nats_server: EmbeddedNats,
    prefix: str,
    publisher: Publisher,
    stream_names: tuple[str, str, str],
    tmp_path: Path,
) -> None:
    await publish_samples(publisher, [sample_event(i) for i in range(5000)])
    data = str(tmp_path / "data")
    common = ["--nats-url", nats_server.url, "--data-dir", data, "--prefix", prefix]
    first = cli("replay", "--role", "activity", "--quiet", *common)
    assert first.returncode == 0, first.stderr
    assert "replayed 5000 events" in first.stdout
    digest = first.stdout.strip().rsplit("digest ", 1)[1]
    shown = cli("state", "digest", "--role", "activity", "--data-dir", data)
    assert shown.returncode == 0 and shown.stdout.strip() == digest
    second = cli("replay", "--role", "activity", "--quiet", *common)
    assert second.stdout.strip().rsplit("digest ", 1)[1] == digest, "replay is deterministic"

    role = subprocess.Popen(
        [sys.executable, "-m", "streamproc.cli", "role", "activity", *common],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert role.stdout is not None
        while "Press Ctrl-C" not in role.stdout.readline():
            assert role.poll() is None
        locked = cli("replay", "--role", "activity", "--quiet", *common)
        assert locked.returncode == 2
        assert "in use by another streamproc process" in locked.stderr
    finally:
        role.send_signal(signal.SIGTERM)
        role.communicate(timeout=30)
    assert role.returncode == 0
    assert cli("state", "digest", "--role", "activity", "--data-dir", data).stdout.strip() == digest


def test_state_digest_of_a_missing_directory_is_an_error(tmp_path: Path) -> None:
    r = cli("state", "digest", "--path", str(tmp_path / "nothing"))
    assert r.returncode == 2
    assert "is not a state directory" in r.stderr
