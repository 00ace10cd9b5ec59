"""A lease in a JetStream key-value bucket: at most one holder per key, gone unless renewed.

The bucket (``<prefix>_leases``) keeps one revision per key and has ``max_age`` = the TTL,
so an entry nobody rewrites disappears TTL after its last write. Taking the lease is a
create (expected last subject sequence 0, or the tombstone a release left); renewing is an
update that expects the revision we wrote last. JetStream orders both, so of two contenders
exactly one wins, and a holder whose entry was replaced learns it on its next renewal.

A holder counts itself the holder only until ``(send time of its last successful write) +
TTL``. The server stored that write after we sent it and keeps it TTL from then, so our
belief always ends before anyone else can take the lease — without relying on synchronised
clocks, only on clocks ticking at the same rate. Renewal runs every TTL/3.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import os
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import TypeVar

import nats.errors
import nats.js.errors
from nats.js.client import KV_PRE_TEMPLATE
from nats.js.kv import KeyValue

from streamproc.bus import jsapi
from streamproc.bus.fastclient import FastClient
from streamproc.cancellation import checkpoint
from streamproc.config import ConfigError
from streamproc.configfile.registry import env_name
from streamproc.configfile.sections import Sections
from streamproc.names import lease_bucket

bucket_name = lease_bucket

log = logging.getLogger(__name__)

ENV_TTL = env_name("lease.ttl_s")
DEFAULT_TTL_S = 5.0
MIN_TTL_S = 0.5
MAX_TTL_S = 300.0

NatsFailure = (nats.errors.Error, TimeoutError, OSError)
"""What a lease call can fail with while NATS is slow or unreachable."""


class LeaseError(RuntimeError):
    """The lease bucket cannot be used (JetStream refused it, or it is misconfigured)."""


def lease_ttl(env: Mapping[str, str]) -> float:
    """``STREAMPROC_LEASE_TTL_S`` (``lease.ttl_s``), default 5 s."""

    raw = (env.get(ENV_TTL) or "").strip()
    if not raw:
        return DEFAULT_TTL_S
    try:
        ttl = float(raw)
    except ValueError:
        raise ConfigError(f"{ENV_TTL}={raw!r}: not a number of seconds") from None
    if not MIN_TTL_S <= ttl <= MAX_TTL_S:
        raise ConfigError(f"{ENV_TTL}={raw}: between {MIN_TTL_S:g} and {MAX_TTL_S:g} seconds")
    return ttl


def ttl_from(sections: Sections) -> float:
    """:func:`lease_ttl` from the typed ``[lease]`` section (bounds checked at start)."""
    return sections.lease.ttl_s


def holder_id(node_id: str) -> str:
    """Unique per process lifetime: a restarted process is a new holder."""
    return f"{node_id}/{os.getpid()}/{secrets.token_hex(4)}"


def call_timeout(ttl_s: float) -> float:
    """How long one KV call may take: well inside the TTL, but not absurdly short."""
    return min(5.0, max(0.25, ttl_s / 3))


SETUP_TIMEOUT_S = 5.0
SETUP_BUDGET_S = 30.0
"""Creating and binding the bucket happen once, at start, and hold no lease yet: they are
asked with an ordinary API timeout, again while the cluster is still electing or busy
creating the replicated bucket (a lease-sized timeout gave up on a loaded cluster)."""
T = TypeVar("T")


async def _patiently(call: Callable[[], Awaitable[T]]) -> T:
    deadline = time.monotonic() + SETUP_BUDGET_S
    while True:
        checkpoint()
        try:
            return await call()
        except (nats.errors.TimeoutError, nats.errors.NoRespondersError, TimeoutError):
            if time.monotonic() + 0.5 > deadline:
                raise
        await asyncio.sleep(0.5)


async def open_bucket(
    nc: FastClient, prefix: str, ttl_s: float, *, replicas: int = 1
) -> tuple[KeyValue, float]:
    """The lease bucket, created if missing, and its TTL.

    The TTL of an existing bucket wins over ``ttl_s`` (with a warning): every contender must
    renew within the same TTL, or one could lose an entry it still believes it holds.
    """
    name = bucket_name(prefix)
    stream = f"KV_{name}"
    setup = nc.jetstream(timeout=SETUP_TIMEOUT_S)
    try:
        info = await jsapi.with_retries(lambda: jsapi.stream_info(nc, stream), 20.0)
        if info is None:
            try:
                await _patiently(
                    lambda: setup.create_key_value(
                        bucket=name,
                        ttl=ttl_s,
                        history=1,
                        replicas=replicas,
                        description="streamproc active/standby leases (planner, auditor)",
                    )
                )
            except nats.js.errors.BadRequestError as exc:
                if exc.err_code != jsapi.STREAM_NAME_IN_USE:  # else: another contender created it
                    raise
            info = await jsapi.with_retries(lambda: jsapi.stream_info(nc, stream), 20.0)
        if info is None:
            raise LeaseError(f"lease bucket {name} vanished while it was being created")
        max_age_ns = int(info.config.get("max_age") or 0)
        if max_age_ns <= 0:
            raise LeaseError(
                f"lease bucket {name} has no TTL (max_age 0), so a dead holder would keep "
                f"its lease forever; delete it (`nats kv del {name}`) and restart"
            )
        actual = max_age_ns / 1e9
        if abs(actual - ttl_s) > 1e-3:
            log.warning(
                "lease bucket %s has a TTL of %g s (set when it was created); using it, not "
                "%s=%g. To change it, stop every planner and auditor and delete the bucket",
                name,
                actual,
                ENV_TTL,
                ttl_s,
            )
        # Bound to a context whose calls answer well inside the TTL (the lease's own calls),
        # from the stream info we have: no further request that could time out.
        kv = KeyValue(
            name=name,
            stream=stream,
            pre=KV_PRE_TEMPLATE.format(bucket=name),
            js=nc.jetstream(timeout=call_timeout(actual)),
            direct=bool(info.config.get("allow_direct")),
        )
        return kv, actual
    except (jsapi.JsApiError, *NatsFailure) as exc:
        raise LeaseError(f"cannot open the lease bucket {name}: {exc}") from None


class Lease:
    """One key of the lease bucket, from one holder's point of view."""

    def __init__(
        self,
        kv: KeyValue,
        key: str,
        holder: str,
        ttl_s: float,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.kv = kv
        self.key = key
        self.holder = holder
        self.ttl_s = ttl_s
        self.clock = clock
        self.revision: int | None = None
        """The revision we wrote last, while we believe we hold the lease."""
        self.valid_until = 0.0

    @property
    def renew_every(self) -> float:
        return self.ttl_s / 3

    def held(self) -> bool:
        return self.revision is not None and self.clock() < self.valid_until

    async def acquire(self) -> bool:
        """Take the lease if it is free (or already ours); False if someone else holds it
        or NATS cannot be reached."""
        if self.revision is not None:
            return await self.renew()
        sent = self.clock()
        try:
            revision = await self.kv.create(self.key, self.holder.encode())
        except nats.js.errors.KeyWrongLastSequenceError:
            return await self._reclaim()
        except NatsFailure as exc:
            log.debug("lease %s: acquire failed: %s", self.key, exc)
            return False
        self._hold(revision, sent)
        return True

    async def renew(self) -> bool:
        """Extend the lease; False (and dropped) once it is lost. A NATS failure keeps the
        lease only until its validity ends."""
        if self.revision is None:
            return False
        sent = self.clock()
        try:
            revision = await self.kv.update(self.key, self.holder.encode(), last=self.revision)
        except nats.js.errors.KeyWrongLastSequenceError:
            if await self._reclaim():
                return True
            self.drop()
            return False
        except NatsFailure as exc:
            if self.held():
                log.debug("lease %s: renewal failed, retrying: %s", self.key, exc)
                return True
            log.debug("lease %s: renewal failed past the TTL: %s", self.key, exc)
            self.drop()
            return False
        self._hold(revision, sent)
        return True

    async def _reclaim(self) -> bool:
        """The entry moved under us: keep the lease only if the entry is still ours (a
        write of ours that timed out but was stored), by renewing on its revision."""
        try:
            entry = await self.kv.get(self.key)
        except (nats.js.errors.KeyNotFoundError, *NatsFailure):
            return False
        if entry.value != self.holder.encode() or entry.revision is None:
            return False
        sent = self.clock()
        try:
            revision = await self.kv.update(self.key, self.holder.encode(), last=entry.revision)
        except NatsFailure:
            return False
        self._hold(revision, sent)
        return True

    async def release(self) -> None:
        """Give the lease up at once (a clean stop), so a standby need not wait for the TTL.
        Only our own revision is deleted: a lease someone else took meanwhile stays theirs."""
        revision, self.revision = self.revision, None
        self.valid_until = 0.0
        if revision is None:
            return
        try:
            await self.kv.delete(self.key, last=revision)
        except NatsFailure as exc:
            log.debug("lease %s: release failed (it expires by itself): %s", self.key, exc)

    async def current_holder(self) -> str | None:
        """Who holds the lease now (as the bucket says), or None."""
        try:
            entry = await self.kv.get(self.key)
        except (nats.js.errors.KeyNotFoundError, *NatsFailure):
            return None
        return (entry.value or b"").decode(errors="replace") or None

    def drop(self) -> None:
        self.revision = None
        self.valid_until = 0.0

    def _hold(self, revision: int, sent: float) -> None:
        self.revision = revision
        self.valid_until = sent + self.ttl_s


async def entries(nc: FastClient, prefix: str) -> dict[str, bytes]:
    """Every key the lease bucket holds now, with its value — read with two kinds of plain
    API request (the stream's subjects, each one's last message), no consumer: it is asked
    every few seconds, and a watcher's ordered consumer per call would pile up."""
    name = bucket_name(prefix)
    stream = f"KV_{name}"
    head = f"$KV.{name}."
    try:
        info = await jsapi.request(nc, f"STREAM.INFO.{stream}", {"subjects_filter": head + ">"})
    except jsapi.JsApiError as exc:
        if exc.err_code == jsapi.STREAM_NOT_FOUND:
            return {}
        raise
    out: dict[str, bytes] = {}
    for subject in sorted((info.get("state") or {}).get("subjects") or {}):
        try:
            doc = await jsapi.request(nc, f"STREAM.MSG.GET.{stream}", {"last_by_subj": subject})
        except jsapi.JsApiError as exc:
            if exc.err_code == jsapi.NO_MESSAGE:  # expired meanwhile
                continue
            raise
        msg = doc["message"]
        if b"KV-Operation" in base64.b64decode(msg.get("hdrs") or ""):
            continue  # a deleted or purged key (a released lease)
        out[subject[len(head) :]] = base64.b64decode(msg.get("data") or "")
    return out
