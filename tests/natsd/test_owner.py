"""One owner per NATS store: the decision (pure), the lock and owner file, the embedded
server holding the store for as long as it runs — and no longer than the process that
started it — and a server left behind by a dead owner stopped by the next ``up``."""

from __future__ import annotations

import asyncio
import functools
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from streamproc.bus.connect import connect
from streamproc.natsd import owner as o
from streamproc.natsd.server import EmbeddedNats, find_binary, free_port, server_config
from tests.helpers import eventually


def rec(**changes: object) -> o.Owner:
    base = {
        "url": "nats://127.0.0.1:4222",
        "pid": 4121,
        "command": "up",
        "node": "n1",
        "started": "2026-03-01T10:00:00+00:00",
        "ready": True,
        "server_pids": [4130],
    }
    return o.Owner(**{**base, **changes})  # type: ignore[arg-type]


# ---------------------------------------------------------------------- pure


@pytest.mark.parametrize(
    ("locked", "owner", "alive", "serving", "waited", "step"),
    [
        (True, None, False, True, 0.0, o.Step.START),
        (True, rec(), True, False, 0.0, o.Step.START),  # a leftover file of a dead owner
        (False, rec(), True, False, 0.0, o.Step.CONNECT),
        (False, rec(), True, True, 0.0, o.Step.REFUSE),  # a second `up`
        (False, rec(ready=False), True, False, 1.0, o.Step.WAIT),  # still starting
        (False, rec(ready=False), True, True, 31.0, o.Step.REFUSE),
        (False, rec(temporary=True), True, False, 1.0, o.Step.WAIT),  # ends with its command
        (False, rec(temporary=True), True, True, 1.0, o.Step.WAIT),
        (False, rec(temporary=True), True, False, 31.0, o.Step.REFUSE),
        (False, rec(), False, False, 1.0, o.Step.WAIT),  # the holder has not written yet
        (False, None, False, False, 1.0, o.Step.WAIT),
        (False, None, False, False, 31.0, o.Step.REFUSE),
    ],
)
def test_next_step(
    locked: bool, owner: o.Owner | None, alive: bool, serving: bool, waited: float, step: o.Step
) -> None:
    got = o.next_step(
        locked=locked, owner=owner, alive=alive, serving=serving, waited=waited, patience=30
    )
    assert got is step


def test_a_server_whose_owner_died_is_stopped_by_up_and_used_by_commands() -> None:
    step = functools.partial(
        o.next_step, locked=False, owner=rec(), alive=True, patience=30, orphan=True
    )
    assert step(serving=True, waited=0.0) is o.Step.STOP
    assert step(serving=True, waited=31.0) is o.Step.REFUSE, "it would not stop"
    assert step(serving=False, waited=0.0) is o.Step.CONNECT
    assert step(locked=True, serving=True, waited=0.0) is o.Step.START, "it is gone"


def test_messages_name_the_process_its_url_and_what_to_do() -> None:
    store = Path("/srv/data/nats")
    busy = o.busy_message(store, rec(), lambda pid: True)
    assert busy == (
        "the NATS store /srv/data/nats is in use by `streamproc up` (pid 4121, node n1, since "
        "2026-03-01T10:00:00+00:00) at nats://127.0.0.1:4222: stop it (kill 4121) first, pass "
        "--nats-url nats://127.0.0.1:4222 to use it, or give this one another --data-dir; "
        "one-shot commands (index, streams, status, notify tail, ...) connect to it by themselves"
    )
    orphan = o.busy_message(store, rec(), lambda pid: pid == 4130)
    assert "(pid 4121, no longer running," in orphan
    assert "its nats-server (pid 4130) still runs: stop it (kill 4130) first" in orphan
    temp = o.busy_message(store, rec(command="index add", temporary=True), lambda pid: True)
    assert "`streamproc index add` (pid 4121" in temp and "ends with its command" in temp
    gone = o.unreachable_message(store, rec(), "no connection within 2.5 s", lambda pid: True)
    assert "held by `streamproc up` (pid 4121" in gone
    assert "does not answer (no connection within 2.5 s)" in gone
    assert "if it is hung, stop it (kill 4121 4130)" in gone and "--nats-url" in gone


def test_command_label_and_record_round_trip() -> None:
    assert o.command_label(["streamproc", "index", "add", "--tenant", "t"]) == "index add"
    assert o.command_label(["/x/cli.py", "up", "--demo"]) == "up"
    assert o.command_label(["streamproc", "role", "planner", "extra"]) == "role planner"
    assert o.command_label(["pytest"]) == "streamproc"
    assert o.decode(o.encode(rec())) == rec()
    assert o.decode(b'{"url": "nats://x", "pi') is None  # cut short by a crash: no owner
    assert o.decode(b"[]") is None


# ---------------------------------------------------------------------- lock and file


def test_the_lock_is_exclusive_and_release_gives_it_back(tmp_path: Path) -> None:
    first = o.StoreLock.try_acquire(tmp_path)
    assert first is not None
    assert o.StoreLock.try_acquire(tmp_path) is None, "a second open lock, even in-process"
    first.publish(rec(pid=os.getpid()))
    assert o.read_owner(tmp_path) == rec(pid=os.getpid())
    assert not list(tmp_path.glob(".owner.json.*")), "written by rename"
    first.release()
    first.release()
    assert o.read_owner(tmp_path) is None and not (tmp_path / o.OWNER_FILE).exists()
    again = o.StoreLock.try_acquire(tmp_path)
    assert again is not None
    again.release()


def test_resolve_connects_to_a_settled_owner_and_waits_for_a_temporary_one(
    tmp_path: Path,
) -> None:
    held = o.StoreLock.try_acquire(tmp_path)
    assert held is not None
    held.publish(rec(pid=os.getpid(), server_pids=[]))
    found = o.resolve(tmp_path, command="streams apply", node="n", serving=False)
    assert found == rec(pid=os.getpid(), server_pids=[])
    with pytest.raises(o.StoreBusy, match=r"in use by `streamproc up` \(pid \d+"):
        o.resolve(tmp_path, command="up", node="n", serving=True)

    held.update(temporary=True, command="index add")
    notes: list[str] = []
    with pytest.raises(o.StoreBusy, match="ends with its command"):
        o.resolve(tmp_path, command="x", node="n", serving=False, patience=0.2, note=notes.append)
    assert notes == [
        f"waiting for the NATS store {tmp_path}, in use by " + o.describe(held.owner, o.pid_alive)
    ]
    threading.Timer(0.3, held.release).start()  # the temporary server's command ends
    taken = o.resolve(tmp_path, command="streams apply", node="n", serving=False, temporary=True)
    assert isinstance(taken, o.StoreLock)
    mine = o.read_owner(tmp_path)
    assert mine is not None and mine.temporary and mine.command == "streams apply"
    assert mine.pid == os.getpid() and not mine.ready
    taken.release()


async def test_the_server_holds_the_store_while_it_runs_even_without_its_parent(
    tmp_path: Path,
) -> None:
    store = tmp_path / "nats"
    srv = EmbeddedNats(store, port=free_port()).start()
    try:
        record = o.read_owner(store)
        assert record is not None and srv.proc is not None
        assert record.ready and record.url == srv.url and record.server_pids == [srv.proc.pid]
        with pytest.raises(o.StoreBusy, match=f"at {srv.url}"):
            EmbeddedNats(store, port=free_port()).start()
        # The starting process dies (its descriptor closes): the server keeps the lock.
        assert srv.lock is not None
        os.close(srv.lock.fd)
        srv.lock.fd = -1
        assert o.StoreLock.try_acquire(store) is None
        nc = await connect(srv.url)  # and a one-shot command still reaches it
        await nc.close()
    finally:
        srv.kill()
    after = o.StoreLock.try_acquire(store)
    assert after is not None, "gone with the server"
    after.release()


def test_a_server_that_fails_to_start_gives_the_store_up(tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        with pytest.raises(o.NatsServerError, match="exited"):
            EmbeddedNats(tmp_path, port=s.getsockname()[1]).start(timeout=10)
    assert o.read_owner(tmp_path) is None
    lock = o.StoreLock.try_acquire(tmp_path)
    assert lock is not None
    lock.release()


def dead_pid() -> int:
    done = subprocess.Popen(["true"])
    done.wait()
    return done.pid


def orphaned(
    store: Path, argv: list[str], named: list[int] | None = None
) -> subprocess.Popen[bytes]:
    """``argv`` started holding the store's lock (plainly: no parent-death signal, as an
    older build started its server), then its owner gone; owner.json names ``named`` (default:
    that process) as the owner's server."""
    lock = o.StoreLock.try_acquire(store)
    assert lock is not None
    log = open(store / "nats-server.log", "wb")  # noqa: SIM115 - handed to the child
    with log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, pass_fds=(lock.fd,))
    lock.publish(o.Owner(url="nats://127.0.0.1:1", pid=dead_pid(), command="up", node="old",
                         started=o.now_text(), ready=True,
                         server_pids=[proc.pid] if named is None else named))  # fmt: skip
    os.close(lock.fd)  # the owner dies; its server keeps the lock
    lock.fd = -1
    return proc


async def test_up_stops_the_server_a_dead_owner_left_on_its_store(tmp_path: Path) -> None:
    store = tmp_path / "nats"
    store.mkdir()
    conf = store / "nats-server.conf"
    conf.write_text(server_config(store, "127.0.0.1", free_port(), "old"))
    server = orphaned(store, [find_binary(), "-c", str(conf)])
    try:
        ready = lambda: "Server is ready" in (store / "nats-server.log").read_text()  # noqa: E731
        await eventually(ready, 20, "the left-behind server serves")
        assert o.holds_store(server.pid, store)
        left = o.read_owner(store)
        assert left is not None
        notes: list[str] = []
        taken = await asyncio.to_thread(
            o.resolve, store, command="up", node="n", serving=True, patience=20,
            note=notes.append,
        )  # fmt: skip
        assert isinstance(taken, o.StoreLock), "the store is ours now"
        assert server.wait(10) == 0, "nats-server stopped cleanly on SIGTERM"
        assert notes == [
            f"stopping the nats-server (pid {server.pid}) that `streamproc up` (pid {left.pid}, "
            f"no longer running) left on {store}"
        ]
        taken.release()
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()


def test_a_pid_that_does_not_hold_the_store_is_never_signalled(tmp_path: Path) -> None:
    stranger = subprocess.Popen(["sleep", "60"])  # the owner file names it: a reused pid
    holder = orphaned(tmp_path, ["sleep", "60"], named=[stranger.pid])
    try:
        assert o.holds_store(holder.pid, tmp_path) and not o.holds_store(stranger.pid, tmp_path)
        with pytest.raises(o.StoreBusy, match="in use by"):
            o.resolve(tmp_path, command="up", node="n", serving=True, patience=0.3)
        assert stranger.poll() is None and holder.poll() is None
    finally:
        for proc in (stranger, holder):
            proc.kill()
            proc.wait()


STARTER = """
import sys, threading, time
from pathlib import Path
from streamproc.natsd.server import EmbeddedNats
srv = EmbeddedNats(Path(sys.argv[1]), port=int(sys.argv[2]))
starter = threading.Thread(target=srv.start)  # a thread that ends right after
starter.start()
starter.join()
print(srv.proc.pid, srv.url, flush=True)
time.sleep(600)
"""


async def test_the_server_stops_when_the_process_that_started_it_is_killed(
    tmp_path: Path,
) -> None:
    store = tmp_path / "nats"
    parent = subprocess.Popen([sys.executable, "-c", STARTER, str(store), str(free_port())],
                              stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert parent.stdout is not None
        pid, url = parent.stdout.readline().split()
        nc = await connect(url)  # it outlived the thread that started it
        await nc.close()
        assert o.holds_store(int(pid), store)
    finally:
        parent.kill()  # SIGKILL: no clean-up of its own
        parent.wait()

    def free() -> bool:
        lock = o.StoreLock.try_acquire(store)
        if lock is not None:
            lock.release()
        return lock is not None

    await eventually(free, 15, "the server gave the store up", every=0.1)
    log = (store / "nats-server.log").read_text()
    assert 'Trapped "terminated" signal' in log and "Server Exiting" in log, log[-1000:]
