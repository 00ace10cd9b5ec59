"""One owner per NATS store directory.

Two nats-servers on one JetStream store lose acknowledged messages, so whoever starts a
server on a store first takes an exclusive ``flock`` on ``<store>/owner.lock`` and writes
``<store>/owner.json``: where the server answers, which process started it and when. The
lock is handed on to the nats-server child, so it lasts while either of them runs, and the
kernel drops it once both are gone — SIGKILL included. A clean stop removes the file. The
child stops with its parent (:func:`streamproc.natsd.server.spawn`); a server that outlived
its owner all the same (started by an older build) is stopped by the next ``up`` on its
store — it holds that store's lock, so it is ours to stop — rather than blocking it.

A one-shot command reads the file and connects to the owner; it starts a temporary server
(taking the lock first) only when nobody holds the store. The decision is :func:`next_step`,
pure; the rest of this module is the file and lock I/O around it.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import enum
import fcntl
import os
import signal
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import msgspec

LOCK_FILE = "owner.lock"
OWNER_FILE = "owner.json"
PATIENCE_S = 30.0
"""How long to wait for an owner that is still starting, or for a temporary server's
command to finish, before giving up with a message."""


class NatsServerError(RuntimeError):
    """The embedded server did not start, stopped, or its store is not ours to use."""


class Owner(msgspec.Struct, kw_only=True, frozen=True):
    """``owner.json``: who runs the server on this store, and where it answers."""

    url: str
    """Client URL (comma-separated for a cluster); empty until the port is known."""
    pid: int
    """The process that holds the lock (``streamproc up``, ``nats``, a one-shot command)."""
    command: str
    node: str
    started: str
    """UTC, ISO 8601."""
    temporary: bool = False
    """A one-shot command's own server, gone when the command ends."""
    ready: bool = False
    server_pids: list[int] = []


class StoreBusy(NatsServerError):
    """Someone else holds the store (exit 2, with who and where)."""


class Step(enum.Enum):
    START = "start"
    """We hold the lock: start a server on the store."""
    CONNECT = "connect"
    """A lasting owner serves the store: use it."""
    WAIT = "wait"
    """The holder is starting, or is a temporary server: wait for it."""
    REFUSE = "refuse"
    """Held, and not ours to use or to replace."""
    STOP = "stop"
    """Held by a server whose owner died: stop it, then wait for the store."""


# ---------------------------------------------------------------------- pure


def next_step(
    *,
    locked: bool,
    owner: Owner | None,
    alive: bool,
    serving: bool,
    waited: float,
    patience: float,
    orphan: bool = False,
) -> Step:
    """What to do about a store: ``locked`` — we just took its lock; ``owner`` — the file's
    record, ``alive`` — whether a process it names still runs (else it is a dead owner's
    leftover, and whoever holds the lock has not written yet); ``serving`` — the caller wants
    to run its own server (``up``, ``nats``), not connect; ``orphan`` — the owner process is
    gone and the server it started still holds the store."""
    if locked:
        return Step.START
    if orphan and serving:
        return Step.STOP if waited < patience else Step.REFUSE
    settled = owner is not None and alive and owner.ready and not owner.temporary
    if settled:
        return Step.REFUSE if serving else Step.CONNECT
    return Step.WAIT if waited < patience else Step.REFUSE


def describe(owner: Owner | None, alive: Callable[[int], bool]) -> str:
    """``streamproc up (pid 12, node n1, since …) at nats://…`` — and what is gone."""
    if owner is None:
        return "a process that has not said who it is (no owner.json yet)"
    state = "" if alive(owner.pid) else ", no longer running"
    text = f"`streamproc {owner.command}` (pid {owner.pid}{state}, node {owner.node}, since "
    text += f"{owner.started})"
    if owner.url:
        text += f" at {owner.url}"
    servers = [p for p in owner.server_pids if alive(p)]
    if servers and not alive(owner.pid):
        text += f"; its nats-server (pid {', '.join(map(str, servers))}) still runs"
    return text


def busy_message(store: Path, owner: Owner | None, alive: Callable[[int], bool]) -> str:
    """Why a second server may not start on ``store``, and what to do."""
    who = describe(owner, alive)
    running = [p for p in ([owner.pid, *owner.server_pids] if owner else []) if alive(p)]
    stop = f"stop it (kill {running[0]})" if running else "stop it"
    if owner is not None and owner.temporary:
        hint = f"it ends with its command: run this again then, or {stop}"
    else:
        use = f"pass --nats-url {owner.url} to use it, " if owner and owner.url else ""
        hint = (
            f"{stop} first, {use}or give this one another --data-dir; one-shot commands "
            "(index, streams, status, notify tail, ...) connect to it by themselves"
        )
    return f"the NATS store {store} is in use by {who}: {hint}"


def waiting_message(store: Path, owner: Owner | None, alive: Callable[[int], bool]) -> str:
    return f"waiting for the NATS store {store}, in use by {describe(owner, alive)}"


def unreachable_message(
    store: Path, owner: Owner, reason: str, alive: Callable[[int], bool]
) -> str:
    """The store is held, but its owner does not answer: a hung or half-dead process."""
    pids = [owner.pid, *owner.server_pids]
    running = [str(p) for p in pids if alive(p)]
    stop = f"if it is hung, stop it (kill {' '.join(running)})" if running else ""
    return (
        f"the NATS store {store} is held by {describe(owner, alive)}, but it does not answer "
        f"({reason}); {stop + ', then ' if stop else ''}run this again, or pass --nats-url "
        f"to use a server that answers"
    )


def command_label(argv: Sequence[str]) -> str:
    """The subcommand words of a command line (``index add``, ``role planner``)."""
    words: list[str] = []
    for arg in argv[1:]:
        if arg.startswith("-") or len(words) == 2:
            break
        words.append(arg)
    return " ".join(words) or "streamproc"


def encode(owner: Owner) -> bytes:
    return msgspec.json.format(msgspec.json.encode(owner), indent=2) + b"\n"


def decode(raw: bytes) -> Owner | None:
    """``None`` for anything unreadable (a file cut short by a crash is no owner)."""
    try:
        return msgspec.json.decode(raw, type=Owner)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None


# ---------------------------------------------------------------------- I/O


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: it exists
        return True
    return True


def holds_store(pid: int, store: Path) -> bool:
    """Whether process ``pid`` has this store's lock file open (Linux ``/proc``): the one
    check that a pid named in ``owner.json`` is still that store's server, pids being reused."""
    try:
        lock = os.stat(store / LOCK_FILE)
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for fd in fds:
        try:
            st = os.stat(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if (st.st_dev, st.st_ino) == (lock.st_dev, lock.st_ino):
            return True
    return False


def stop_orphans(store: Path, owner: Owner, note: Callable[[str], None]) -> list[int]:
    """SIGTERM (nats-server's clean stop: JetStream flushes its store) to the servers a dead
    owner left holding ``store``; the pids signalled."""
    pids = [p for p in owner.server_pids if pid_alive(p) and holds_store(p, store)]
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    if pids:
        note(
            f"stopping the nats-server (pid {', '.join(map(str, pids))}) that `streamproc "
            f"{owner.command}` (pid {owner.pid}, no longer running) left on {store}"
        )
    return pids


def read_owner(store: Path) -> Owner | None:
    try:
        return decode((store / OWNER_FILE).read_bytes())
    except OSError:
        return None


def now_text() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


class StoreLock:
    """The exclusive lock on one store, and its owner file."""

    def __init__(self, store: Path, fd: int) -> None:
        self.store = store
        self.fd = fd
        self.owner: Owner | None = None

    @classmethod
    def try_acquire(cls, store: Path) -> StoreLock | None:
        """The lock, or ``None`` when another open lock (any process) holds it."""
        store.mkdir(parents=True, exist_ok=True)
        fd = os.open(store / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        return cls(store, fd)

    @property
    def held(self) -> bool:
        return self.fd >= 0

    def publish(self, owner: Owner) -> None:
        """Write ``owner.json`` atomically (readers see the old record or the new one)."""
        assert self.held, "publish after release"
        tmp = self.store / f".{OWNER_FILE}.{os.getpid()}"
        tmp.write_bytes(encode(owner))
        os.replace(tmp, self.store / OWNER_FILE)
        self.owner = owner

    def update(self, **changes: object) -> None:
        assert self.owner is not None
        self.publish(msgspec.structs.replace(self.owner, **changes))

    def release(self) -> None:
        """Remove the owner file and unlock (idempotent). Only after the server stopped."""
        if not self.held:
            return
        with contextlib.suppress(FileNotFoundError):
            (self.store / OWNER_FILE).unlink()
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)
        self.fd = -1


def resolve(
    store: Path,
    *,
    command: str,
    node: str,
    serving: bool,
    temporary: bool = False,
    patience: float = PATIENCE_S,
    note: Callable[[str], None] | None = None,
) -> StoreLock | Owner:
    """Take the store (a :class:`StoreLock` with a "starting" record published), or find its
    settled owner (only when not ``serving``); :class:`StoreBusy` otherwise. Blocking: it
    may wait up to ``patience`` for a starting owner or a temporary one's command."""
    note = note or (lambda text: print(f"streamproc: {text}", file=sys.stderr, flush=True))
    start = time.monotonic()
    noted = False
    stopped: set[int] = set()
    while True:
        lock = StoreLock.try_acquire(store)
        owner = None if lock else read_owner(store)
        alive = owner is not None and any(map(pid_alive, [owner.pid, *owner.server_pids]))
        orphan = (
            owner is not None
            and not pid_alive(owner.pid)
            and any(holds_store(p, store) for p in owner.server_pids)
        )
        step = next_step(
            locked=lock is not None,
            owner=owner,
            alive=alive,
            serving=serving,
            waited=time.monotonic() - start,
            patience=patience,
            orphan=orphan,
        )
        if step is Step.START:
            assert lock is not None
            record = Owner(
                url="", pid=os.getpid(), command=command, node=node, started=now_text(),
                temporary=temporary,
            )  # fmt: skip
            lock.publish(record)
            return lock
        if step is Step.CONNECT:
            assert owner is not None
            return owner
        if step is Step.REFUSE:
            raise StoreBusy(busy_message(store, owner if alive else None, pid_alive))
        if step is Step.STOP:
            assert owner is not None
            if not set(owner.server_pids) <= stopped:
                stopped.update(owner.server_pids)
                stop_orphans(store, owner, note)
                noted = True
            time.sleep(0.05)
            continue
        if not noted:
            note(waiting_message(store, owner if alive else None, pid_alive))
            noted = True
        time.sleep(0.05)


async def claim(store: Path, node: str) -> StoreLock:
    """The store, for this process's own server (``up``, ``nats``, ``role``): taken before
    anything else is touched, else :class:`StoreBusy` naming who has it."""
    found = await asyncio.to_thread(
        resolve, store, command=command_label(sys.argv), node=node, serving=True
    )
    assert isinstance(found, StoreLock)
    return found
