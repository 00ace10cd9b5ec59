"""One owner per data directory's NATS store, as an operator meets it: `streamproc up` runs,
and the one-shot commands beside it — with nothing but the data directory — reach it instead
of starting a second server on its store; a second `up` is refused and says who has it; and
after `kill -9` of `up`, its server does not linger: the next `up` starts, with the data."""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from streamproc.bus import jsapi
from streamproc.bus.connect import connect
from streamproc.events.envelope import decode
from streamproc.natsd import owner as o
from streamproc.natsd.server import free_port
from tests.helpers import eventually

SBOM = Path(__file__).resolve().parents[1] / "data" / "sboms" / "debian-base.cdx15.json"
IMAGE = "sha256:" + "ab" * 32


def env() -> dict[str, str]:
    """No NATS URL and no data directory from the caller's environment."""
    out = {k: v for k, v in os.environ.items() if k not in ("NATS_URL", "STREAMPROC_DATA_DIR")}
    out["STREAMPROC_STATUS_INTERVAL_S"] = "0.5"
    return out


def cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "streamproc.cli", *args],
        capture_output=True, text=True, timeout=timeout, env=env(),
    )  # fmt: skip


def start_up(data: Path, nats_port: int) -> subprocess.Popen[str]:
    """`streamproc up` on ``data``, once it says it runs."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamproc.cli", "up", "--data-dir", str(data),
         "--nats-port", str(nats_port), "--http-port", str(free_port())],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env(),
    )  # fmt: skip
    assert proc.stdout is not None
    deadline = time.monotonic() + 60
    out = ""
    while "Press Ctrl-C" not in out and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        out += line
    assert "Press Ctrl-C" in out, out
    return proc


@pytest.fixture
def running_up(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], Path, str]]:
    """`streamproc up` on a temporary data directory: (process, data dir, its NATS URL)."""
    data = tmp_path / "data"
    nats_port = free_port()
    proc = start_up(data, nats_port)
    try:
        yield proc, data, f"nats://127.0.0.1:{nats_port}"
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            proc.communicate(timeout=30)


async def test_commands_beside_a_running_up_reach_it_and_a_second_up_is_refused(
    running_up: tuple[subprocess.Popen[str], Path, str],
) -> None:
    proc, data, url = running_up
    record = o.read_owner(data / "nats")
    assert record is not None and record.url == url and record.pid == proc.pid
    assert record.command == "up" and record.ready and not record.temporary

    second = cli("up", "--data-dir", str(data), "--nats-port", "0", "--http-port", "0")
    assert second.returncode == 2, second.stderr
    assert f"is in use by `streamproc up` (pid {proc.pid}" in second.stderr
    assert f"at {url}" in second.stderr and "Traceback" not in second.stderr
    assert proc.poll() is None and o.read_owner(data / "nats") == record, "first one untouched"

    d = ["--data-dir", str(data)]
    added = cli("index", "add", *d, "--tenant", "t1", "--image", IMAGE,
                "--repo", "registry.local/team/app", "--sbom", str(SBOM))  # fmt: skip
    assert added.returncode == 0, added.stderr
    seq = int(added.stdout.rsplit("sequence ", 1)[1].split()[0])
    nc = await connect(url)  # the running server holds that very event at that sequence
    try:
        msg = await jsapi.request(nc, "STREAM.MSG.GET.SCHEDULER", {"seq": seq})
        event = decode(base64.b64decode(msg["message"]["data"]))
        assert event.kind == "image.indexed" and event.tenant == "t1"
        assert getattr(event.payload, "digest", None) == IMAGE
    finally:
        await nc.close()

    def indexed() -> bool:  # ... and the running planner folded it
        r = cli("index", "stats", *d, "--json")
        return r.returncode == 0 and json.loads(r.stdout)["images"] == 1

    await eventually(indexed, 20, "the running system indexed the image", every=0.2)
    applied = cli("streams", "apply", *d)
    assert applied.returncode == 0 and "unchanged" in applied.stdout, applied.stderr

    def healthy() -> subprocess.CompletedProcess[str] | None:
        r = cli("status", *d)
        return r if r.returncode == 0 else None

    status = await eventually(healthy, 20, "status of the running up", every=0.2)
    assert f"/{proc.pid}" in status.stdout and f"head {seq}" in status.stdout
    tail = cli("notify", "tail", *d, "--once")
    assert tail.returncode == 0, tail.stderr
    assert o.read_owner(data / "nats") == record

    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0 and "stopped cleanly" in out
    assert o.read_owner(data / "nats") is None, "a clean stop removes the owner file"


async def test_after_kill_9_of_up_its_server_goes_too_and_up_starts_again(
    running_up: tuple[subprocess.Popen[str], Path, str],
) -> None:
    proc, data, url = running_up
    added = cli("index", "add", "--data-dir", str(data), "--tenant", "t1", "--image", IMAGE,
                "--repo", "registry.local/team/app", "--sbom", str(SBOM))  # fmt: skip
    assert added.returncode == 0, added.stderr
    seq = int(added.stdout.rsplit("sequence ", 1)[1].split()[0])
    record = o.read_owner(data / "nats")
    assert record is not None and len(record.server_pids) == 1
    proc.kill()  # SIGKILL: `up` cleans nothing up
    proc.wait()

    def store_free() -> bool:  # the server stopped by itself (its parent died)
        lock = o.StoreLock.try_acquire(data / "nats")
        if lock is not None:
            lock.release()
        return lock is not None

    await eventually(store_free, 15, "the server of the killed up let the store go", every=0.1)
    assert 'Trapped "terminated" signal' in (data / "nats" / "nats-server.log").read_text()
    again = start_up(data, int(url.rsplit(":", 1)[1]))  # the same port: nothing holds it
    try:
        nc = await connect(url)
        try:  # the acknowledged event is there
            msg = await jsapi.request(nc, "STREAM.MSG.GET.SCHEDULER", {"seq": seq})
            assert decode(base64.b64decode(msg["message"]["data"])).kind == "image.indexed"
        finally:
            await nc.close()
    finally:
        again.send_signal(signal.SIGINT)
        out, _ = again.communicate(timeout=30)
    assert again.returncode == 0 and "stopped cleanly" in out


def test_a_stale_owner_file_without_a_holder_gets_a_temporary_server(tmp_path: Path) -> None:
    store = tmp_path / "nats"
    store.mkdir()
    dead = o.Owner(url=f"nats://127.0.0.1:{free_port()}", pid=2**22 + 7, command="up",
                   node="gone", started="2026-01-01T00:00:00+00:00", ready=True)  # fmt: skip
    (store / o.OWNER_FILE).write_bytes(o.encode(dead))
    r = cli("streams", "apply", "--data-dir", str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert "SCHEDULER " in r.stdout and "created" in r.stdout
    assert (store / "jetstream").is_dir(), "the temporary server ran on the store"
    assert o.read_owner(store) is None, "and left no owner behind"


def test_a_held_store_whose_owner_does_not_answer_is_exit_2(tmp_path: Path) -> None:
    store = tmp_path / "nats"
    lock = o.StoreLock.try_acquire(store)
    assert lock is not None
    url = f"nats://127.0.0.1:{free_port()}"  # nobody listens
    lock.publish(o.Owner(url=url, pid=os.getpid(), command="up", node="hung",
                         started=o.now_text(), ready=True))  # fmt: skip
    try:
        started = time.monotonic()
        r = cli("streams", "apply", "--data-dir", str(tmp_path))
        assert r.returncode == 2, r.stdout
        assert f"held by `streamproc up` (pid {os.getpid()}" in r.stderr
        assert f"at {url}, but it does not answer" in r.stderr
        assert f"stop it (kill {os.getpid()})" in r.stderr and "--nats-url" in r.stderr
        assert time.monotonic() - started < 15
        assert not (store / "jetstream").exists(), "no second server on the store"
    finally:
        lock.release()


def test_a_second_one_shot_command_waits_for_the_first_ones_temporary_server(
    tmp_path: Path,
) -> None:
    store = tmp_path / "nats"
    lock = o.StoreLock.try_acquire(store)
    assert lock is not None
    lock.publish(o.Owner(url="", pid=os.getpid(), command="index add", node="n",
                         started=o.now_text(), temporary=True))  # fmt: skip
    waiting = subprocess.Popen(
        [sys.executable, "-m", "streamproc.cli", "streams", "apply", "--data-dir", str(tmp_path)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env(),
    )  # fmt: skip
    try:
        assert waiting.stderr is not None
        line = waiting.stderr.readline()
        assert "waiting for the NATS store" in line and "`streamproc index add`" in line
        assert waiting.poll() is None and not (store / "jetstream").exists()
    finally:
        lock.release()  # the first command ends
    out, err = waiting.communicate(timeout=60)
    assert waiting.returncode == 0, err
    assert "created" in out and (store / "jetstream").is_dir()
