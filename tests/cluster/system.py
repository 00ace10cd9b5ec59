"""A streamproc installation as processes on a test cluster: the role commands with their
own data directory, node id and HTTP port; a supervisor that restarts a process that exited
with an error (what ``Restart=on-failure`` does under systemd); a fast reader of the event
log; and the checkpoints and consumers that show where each projector resumed."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Iterable
from pathlib import Path

import msgspec

from streamproc.bus import jsapi
from streamproc.bus.fastclient import FastClient
from streamproc.bus.pull import PullLoop
from streamproc.events.envelope import Envelope, decode
from streamproc.natsd.server import free_port
from streamproc.state import keys
from streamproc.state.store import RocksStore
from tests.cluster.processes import RoleProcess
from tests.helpers import eventually

COMMANDS: dict[str, list[str]] = {
    "gateway": ["gateway"],
    "planner": ["planner"],
    "runner": ["runner"],
    "auditor": ["auditor"],
    "activity": ["role", "activity"],
}
"""How each role is started: its own subcommand (``role activity`` has none)."""


class Installation:
    """Role processes against ``url``; instance ``name`` runs role ``role``."""

    def __init__(self, tmp: Path, url: str, prefix: str, env: dict[str, str]) -> None:
        self.tmp = tmp
        self.url = url
        self.prefix = prefix
        self.env = env
        self.procs: dict[str, RoleProcess] = {}
        self.roles: dict[str, str] = {}
        self.ports: dict[str, int] = {}

    def add(self, name: str, role: str, *extra: str) -> RoleProcess:
        port = free_port()
        args = [*COMMANDS[role], "--nats-url", self.url, "--data-dir", str(self.data_dir(name))]
        args += ["--prefix", self.prefix, "--node-id", name, "--http-port", str(port), *extra]
        proc = RoleProcess(name, args, self.env, self.tmp / "logs" / f"{name}.log")
        self.procs[name], self.roles[name], self.ports[name] = proc, role, port
        return proc

    def data_dir(self, name: str) -> Path:
        return self.tmp / "data" / name

    def state_dir(self, name: str) -> Path:
        return self.data_dir(name) / "state" / self.roles[name]

    def http(self, name: str) -> str:
        return f"http://127.0.0.1:{self.ports[name]}"

    def start(self, names: Iterable[str] | None = None) -> None:
        for name in names or self.procs:
            self.procs[name].start()

    def kill(self, names: Iterable[str] | None = None) -> None:
        for name in names or self.procs:
            self.procs[name].kill()

    def stop(self) -> dict[str, int | None]:
        """SIGTERM to all at once, then collect the exit codes."""
        for proc in self.procs.values():
            proc.terminate()
        return {name: proc.stop() for name, proc in self.procs.items()}

    def checkpoint(self, name: str) -> keys.Checkpoint | None:
        """The checkpoint in an instance's state directory (opened read-only)."""
        store = RocksStore(self.state_dir(name), read_only=True)
        try:
            raw = store.get(keys.META_CF, keys.CHECKPOINT_KEY)
        finally:
            store.close()
        return None if raw is None else msgspec.json.decode(raw, type=keys.Checkpoint)


class Supervisor:
    """Restarts a process that exited non-zero after ``delay`` s, like systemd's
    ``Restart=on-failure``; a clean exit (0) or a kill by the test is left alone."""

    def __init__(self, procs: dict[str, RoleProcess], delay: float = 1.0) -> None:
        self.procs = procs
        self.delay = delay
        self.restarts: dict[str, int] = {}
        self._task: asyncio.Task[None] | None = None

    def __enter__(self) -> Supervisor:
        self._task = asyncio.create_task(self._watch())
        return self

    def __exit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(0.2)
            for name, proc in self.procs.items():
                p = proc.proc
                if p is not None and p.poll() is not None and p.returncode not in (0, -9):
                    self.restarts[name] = self.restarts.get(name, 0) + 1
                    await asyncio.sleep(self.delay)
                    proc.start()


async def read_events(nc: FastClient, stream: str) -> list[tuple[int, Envelope]]:
    """Every event of ``stream`` up to its head now, through an ephemeral pull consumer."""
    info = await jsapi.stream_info(nc, stream)
    assert info is not None
    head = info.state.last_seq
    if head == 0:
        return []
    name = f"read_{uuid.uuid4().hex[:12]}"
    config = {"name": name, "deliver_policy": "all", "ack_policy": "none",
              "inactive_threshold": 30_000_000_000, "replay_policy": "instant"}  # fmt: skip
    # Right after quorum is back the stream's group may still be electing: ask again.
    await jsapi.with_retries(lambda: jsapi.create_consumer(nc, stream, config), 30.0)
    pull = await PullLoop(nc, stream, name, batch=2000).start()
    out: list[tuple[int, Envelope]] = []
    try:
        deadline = time.monotonic() + 60
        while (not out or out[-1][0] < head) and time.monotonic() < deadline:
            for seq, _subject, data, _reply in await pull.next_batch(2000, 1.0):
                out.append((seq, decode(data)))
    finally:
        await pull.close()
        with contextlib.suppress(jsapi.JsApiError):
            await jsapi.delete_consumer(nc, stream, name)
    assert out and out[-1][0] >= head, f"read {len(out)} events of {head}"
    return out


async def export_counts(nc: FastClient, stream: str) -> dict[tuple[str, str], int]:
    """How many times each (tenant, export ref) is in the log (exports share subjects)."""
    out: dict[tuple[str, str], int] = {}
    for _seq, event in await read_events(nc, stream):
        ref = getattr(event.payload, "ref", None)
        if event.kind.startswith("export.") and ref is not None:
            out[event.tenant, ref] = out.get((event.tenant, ref), 0) + 1
    return out


async def projector_starts(nc: FastClient, stream: str) -> dict[str, int]:
    """``opt_start_seq`` of every projector consumer: where each projector resumed."""
    doc = await jsapi.request(nc, f"CONSUMER.LIST.{stream}", {"offset": 0})
    out: dict[str, int] = {}
    for c in doc.get("consumers") or []:
        name = c["name"]
        if name.startswith("proj_"):
            out[name] = int(c["config"].get("opt_start_seq") or 0)
    return out


wait_for = eventually
