"""One owner per NATS store: the decision (pure), the lock and owner file, and the embedded
server holding the store for as long as it runs."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from streamproc.bus import owner as o
from streamproc.bus.connect import connect
from streamproc.bus.server import EmbeddedNats, free_port


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
