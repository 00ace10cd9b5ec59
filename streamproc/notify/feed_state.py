"""The HTTP feed consumer's own state: per partition (tenant, kind) its durable checkpoint
and a processing lease, in one SQLite file (the standard library's; several processes may
open it, each change is one transaction).

The lease is what makes two consumers on one state safe: a consumer handles a partition only
while it holds the partition's lease, renews it while handling, and writes a checkpoint only
in a transaction that finds the lease still its own — same holder, same *fence* (a number
raised each time the lease changes hands) and not expired. A consumer that stalled past its
lease and lost the partition to another finds its checkpoint refused (:class:`LeaseLost`):
only the lease holder's progress lands.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
import uuid
from pathlib import Path
from typing import NamedTuple

SCHEMA = """
CREATE TABLE IF NOT EXISTS checkpoints (
    tenant TEXT NOT NULL, kind TEXT NOT NULL, epoch INTEGER NOT NULL, seq INTEGER NOT NULL,
    fence INTEGER NOT NULL, owner_url TEXT NOT NULL, updated_ms INTEGER NOT NULL,
    PRIMARY KEY (tenant, kind));
CREATE TABLE IF NOT EXISTS leases (
    tenant TEXT NOT NULL, kind TEXT NOT NULL, holder TEXT NOT NULL, fence INTEGER NOT NULL,
    expires_ms INTEGER NOT NULL, PRIMARY KEY (tenant, kind));
"""


class LeaseLost(RuntimeError):
    """Another consumer holds the partition now: this one's checkpoint did not land."""


class Checkpoint(NamedTuple):
    epoch: int
    seq: int


class Lease(NamedTuple):
    tenant: str
    kind: str
    fence: int


def _ms() -> int:
    return time.time_ns() // 1_000_000


class FeedState:
    def __init__(self, path: Path, *, ttl_s: float, holder: str | None = None) -> None:
        self.path = path
        self.ttl_ms = int(ttl_s * 1000)
        self.holder = holder or uuid.uuid4().hex
        """This consumer (one per process)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        with self._db() as db:
            db.executescript(SCHEMA)

    def _db(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")  # a written checkpoint survives a power loss
        return db

    # ------------------------------------------------------------------ blocking parts

    def _acquire(self, tenant: str, kind: str) -> Lease | None:
        db = self._db()
        try:
            db.execute("BEGIN IMMEDIATE")
            row = db.execute(
                "SELECT holder, fence, expires_ms FROM leases WHERE tenant=? AND kind=?",
                (tenant, kind),
            ).fetchone()
            now = _ms()
            if row is not None and row[0] != self.holder and row[2] > now:
                db.execute("ROLLBACK")
                return None  # another consumer handles it
            if row is None:
                fence = 1
            elif row[0] == self.holder:
                fence = row[1]  # still ours: renewed
            else:
                fence = row[1] + 1  # taken over from a holder whose lease ran out
            db.execute(
                "INSERT INTO leases VALUES (?, ?, ?, ?, ?) ON CONFLICT (tenant, kind) DO UPDATE "
                "SET holder=excluded.holder, fence=excluded.fence, expires_ms=excluded.expires_ms",
                (tenant, kind, self.holder, fence, now + self.ttl_ms),
            )
            db.execute("COMMIT")
            return Lease(tenant, kind, fence)
        finally:
            db.close()

    def _held(self, db: sqlite3.Connection, lease: Lease) -> bool:
        row = db.execute(
            "SELECT holder, fence, expires_ms FROM leases WHERE tenant=? AND kind=?",
            (lease.tenant, lease.kind),
        ).fetchone()
        return (
            row is not None and row[0] == self.holder and row[1] == lease.fence and row[2] > _ms()
        )

    def _renew(self, lease: Lease) -> None:
        db = self._db()
        try:
            db.execute("BEGIN IMMEDIATE")
            if not self._held(db, lease):
                db.execute("ROLLBACK")
                raise LeaseLost(f"lost the lease of {lease.tenant} {lease.kind}")
            db.execute(
                "UPDATE leases SET expires_ms=? WHERE tenant=? AND kind=?",
                (_ms() + self.ttl_ms, lease.tenant, lease.kind),
            )
            db.execute("COMMIT")
        finally:
            db.close()

    def _commit(self, lease: Lease, cp: Checkpoint, owner_url: str) -> None:
        db = self._db()
        try:
            db.execute("BEGIN IMMEDIATE")
            if not self._held(db, lease):
                db.execute("ROLLBACK")
                raise LeaseLost(
                    f"checkpoint {lease.tenant} {lease.kind} at {cp.seq} not written: another "
                    "consumer holds the partition's lease now"
                )
            db.execute(
                "INSERT INTO checkpoints VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (tenant, kind) "
                "DO UPDATE SET epoch=excluded.epoch, seq=excluded.seq, fence=excluded.fence, "
                "owner_url=excluded.owner_url, updated_ms=excluded.updated_ms",
                (lease.tenant, lease.kind, cp.epoch, cp.seq, lease.fence, owner_url, _ms()),
            )
            db.execute("COMMIT")
        finally:
            db.close()

    def _release(self, lease: Lease) -> None:
        db = self._db()
        try:
            db.execute(
                "DELETE FROM leases WHERE tenant=? AND kind=? AND holder=? AND fence=?",
                (lease.tenant, lease.kind, self.holder, lease.fence),
            )
        finally:
            db.close()

    def adopt(self, tenant: str, kind: str, cp: Checkpoint, owner_url: str) -> bool:
        """Take over a checkpoint kept elsewhere (an earlier version's file) if the partition
        has none yet; True if it was written."""
        db = self._db()
        try:
            cur = db.execute(
                "INSERT INTO checkpoints VALUES (?, ?, ?, ?, 0, ?, ?) ON CONFLICT DO NOTHING",
                (tenant, kind, cp.epoch, cp.seq, owner_url, _ms()),
            )
            return cur.rowcount == 1
        finally:
            db.close()

    def checkpoint(self, tenant: str, kind: str) -> Checkpoint | None:
        db = self._db()
        try:
            row = db.execute(
                "SELECT epoch, seq FROM checkpoints WHERE tenant=? AND kind=?", (tenant, kind)
            ).fetchone()
        finally:
            db.close()
        return Checkpoint(*row) if row is not None else None

    # ------------------------------------------------------------------ async faces

    async def acquire(self, tenant: str, kind: str) -> Lease | None:
        """The partition's lease for this consumer (renewed if it already has it), or None
        while another consumer holds it."""
        return await asyncio.to_thread(self._acquire, tenant, kind)

    async def renew(self, lease: Lease) -> None:
        await asyncio.to_thread(self._renew, lease)

    async def commit(self, lease: Lease, cp: Checkpoint, owner_url: str) -> None:
        """Write the checkpoint if the lease is still this consumer's; else LeaseLost."""
        await asyncio.to_thread(self._commit, lease, cp, owner_url)

    async def release(self, lease: Lease) -> None:
        await asyncio.to_thread(self._release, lease)
