"""The auditor's NATS service: chain verification of one tenant, from the auditor's state.

Each question opens a read-only, point-in-time view of the auditor's state directory, so a
long chain blocks neither the event loop nor the fold, and a chain being appended to is
verified up to the head it had when the view opened. A broken chain is an answer
(``verified: false`` and where), not an error. Every auditor instance answers — the active
one and the standbys (their chains are folded from the same log; verifying signs nothing) —
once caught up with the stream head as it was at start.

Verifying is a whole-chain pass of CPU-bound hashing, so any reader of the API could
otherwise keep an auditor's cores (and, in ``up``, the gateway's event loop) busy. The work
is bounded (:class:`Verifications`): one verification at a time per instance, on a thread of
its own; questions about the same chain that arrive while one waits share it; a tenant's next
verification starts no sooner than :data:`COOLDOWN` times its last one's duration after it
ended (a tenant gets at most a fifth of the verifier), other tenants' waiting ones go first;
and at most :data:`PER_TENANT` questions of one tenant (429) and :data:`WAITING` in all
(503) wait. Failures answer without internals (paths, exception text): those go to the log.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import msgspec
from nats.aio.client import Client

from streamproc.audit.dsse import Keyring
from streamproc.audit.layout import HEADS_CF
from streamproc.audit.signing import build_keyring
from streamproc.audit.verify import UnknownTenant, verify_tenant
from streamproc.bus import services
from streamproc.bus.services import Served, ServiceFailure
from streamproc.cancellation import checkpoint
from streamproc.queries import AUDITOR, VERIFY, ChainReport, VerifyQuery, read_query
from streamproc.runtime.reactor import RoleContext
from streamproc.state.settings import sizes_from
from streamproc.state.store import RocksStore, StoreSizes

log = logging.getLogger(__name__)
COOLDOWN = 4.0
PER_TENANT = 4
WAITING = 32
CONCURRENCY = 64
"""Questions in the service at once: above :data:`WAITING`, so refusals are answered at
once instead of queueing in the client."""

_query = msgspec.json.Decoder(VerifyQuery)
_encode = msgspec.json.Encoder().encode
Key = tuple[str, bool]


DEFAULT_SIZES = StoreSizes()
"""A read-only view's memory bounds when none are configured (tests)."""


def verify(
    state_dir: Path,
    keyring: Callable[[], Keyring],
    tenant: str,
    log_view: bool,
    sizes: StoreSizes = DEFAULT_SIZES,
) -> ChainReport:
    """Verify ``tenant``'s chain in a read-only view of ``state_dir`` (blocking)."""
    try:
        store = RocksStore(state_dir, read_only=True, sizes=sizes)
    except FileNotFoundError as exc:
        log.warning("chain verification: no auditor state: %s", exc)
        raise ServiceFailure(
            503, "no-audit-state", "the auditor's state is not available yet; retry"
        ) from None
    try:
        if HEADS_CF not in store.families():
            raise UnknownTenant(f"no audit chain for tenant {tenant!r}")
        return verify_tenant(store, tenant, keyring(), log_view=log_view)
    except UnknownTenant as exc:
        raise ServiceFailure(404, "not-found", str(exc)) from None
    finally:
        store.close()


class Verifications:
    """Runs ``run(tenant, log_view)`` (blocking) for questions, within the bounds above."""

    def __init__(
        self,
        run: Callable[[str, bool], ChainReport],
        *,
        cooldown: float = COOLDOWN,
        per_tenant: int = PER_TENANT,
        waiting: int = WAITING,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._run = run
        self._cooldown = cooldown
        self._per_tenant = per_tenant
        self._waiting = waiting
        self._clock = clock
        self._queued: dict[Key, asyncio.Future[ChainReport]] = {}
        """Not started yet, in arrival order; a question joins its chain's entry."""
        self._waiters: dict[str, int] = {}
        self._not_before: dict[str, float] = {}
        self._wake = asyncio.Event()
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="chain-verify")
        self._worker: asyncio.Task[None] | None = None

    async def ask(self, tenant: str, log_view: bool) -> ChainReport:
        """The verification of ``tenant``'s chain, started after this question arrived."""
        if self._waiters.get(tenant, 0) >= self._per_tenant:
            raise ServiceFailure(
                429,
                "verify-quota",
                f"{self._per_tenant} verifications of this chain are waiting already; retry",
            )
        if sum(self._waiters.values()) >= self._waiting:
            raise ServiceFailure(503, "busy", "the auditor has too many verifications waiting")
        key = (tenant, log_view)
        answer = self._queued.get(key)
        if answer is None:
            answer = asyncio.get_running_loop().create_future()
            answer.add_done_callback(_retrieved)
            self._queued[key] = answer
            self.wake()
        if self._worker is None:
            self._worker = asyncio.create_task(self._work(), name="chain-verify")
        self._waiters[tenant] = self._waiters.get(tenant, 0) + 1
        try:
            return await asyncio.shield(answer)
        finally:
            self._waiters[tenant] -= 1
            if not self._waiters[tenant]:
                del self._waiters[tenant]

    def wake(self) -> None:
        """Look at the queue again (a question arrived, or the clock moved on)."""
        self._wake.set()

    async def close(self) -> None:
        if self._worker is not None:
            self._worker.cancel()
            await asyncio.gather(self._worker, return_exceptions=True)
        for answer in self._queued.values():
            answer.cancel()
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _next(self) -> tuple[Key | None, float | None]:
        """The first queued chain whose tenant may go now, else how long until one may."""
        now = self._clock()
        soonest = None
        for key in self._queued:
            at = self._not_before.get(key[0], 0.0)
            if at <= now:
                return key, None
            soonest = at - now if soonest is None else min(soonest, at - now)
        return None, soonest

    async def _work(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            checkpoint()
            key, wait = self._next()
            if key is None:
                self._wake.clear()
                try:
                    async with asyncio.timeout(wait):
                        await self._wake.wait()
                except TimeoutError:
                    pass
                continue
            answer = self._queued.pop(key)
            began = self._clock()
            try:
                answer.set_result(await loop.run_in_executor(self._pool, self._run, *key))
            except asyncio.CancelledError:
                answer.cancel()
                raise
            except Exception as exc:
                answer.set_exception(exc)
            finally:
                took = self._clock() - began
                self._not_before[key[0]] = self._clock() + self._cooldown * took
                self._forget(self._clock())

    def _forget(self, now: float) -> None:
        """Tenants whose cooldown is over need no entry."""
        for tenant in [t for t, at in self._not_before.items() if at <= now]:
            del self._not_before[tenant]


def _retrieved(answer: asyncio.Future[ChainReport]) -> None:
    """Nobody may be waiting any more (deadlines): do not warn about an unread failure."""
    if not answer.cancelled():
        answer.exception()


async def serve_verification(
    nc: Client,
    prefix: str,
    state_dir: Path,
    keyring: Callable[[], Keyring],
    *,
    node: str = "",
    sizes: StoreSizes = DEFAULT_SIZES,
) -> Served:
    """``keyring()`` is read per question, so trusted keys changed on disk count at once.
    ``sizes``: the read-only views' memory bounds, as configured."""
    verifications = Verifications(lambda tenant, log_view: verify(state_dir, keyring, tenant,
                                                                  log_view, sizes))  # fmt: skip

    async def answer(data: bytes) -> bytes:
        query = read_query(_query, data)
        return _encode(await verifications.ask(query.tenant, query.log_view))

    return await services.serve(
        nc,
        prefix,
        AUDITOR,
        {VERIFY: answer},
        description="audit chain verification from the auditor's state",
        metadata={"node": node},
        concurrency=CONCURRENCY,
        on_stop=verifications.close,
    )


async def start(ctx: RoleContext) -> Served:
    """The ``services`` hook of the auditor role."""
    s = ctx.settings
    return await serve_verification(
        ctx.publisher.nc,
        s.prefix,
        s.state_dir(ctx.role),
        lambda: build_keyring(s.data_dir, env=s.configuration.values),
        node=s.node_id,
        sizes=s.configuration.built(sizes_from),
    )
