"""A checkpointed consumer of the Notify HTTP feed (``streamproc notify tail --http``, and for
embedding): one partition per allowlisted tenant and kind, each with its own progress.

Per partition and poll it takes the partition's processing lease (:mod:`.feed_state`),
reports its persisted position (caught-up polls included), reads a page after it, checks
the page's, each envelope's and each payload's identity (tenant, kind, id), hands each event
to the handler while renewing the lease, writes the checkpoint in a transaction fenced by the
lease — after the effect, so a crash replays the event rather than losing it — and reports
the new position after the batch.

An unavailable owner, a rejected token, a malformed event, a tenant mismatch or a handler
failure leaves the partition at its last successful event (the next poll tries again) while
the other partitions go on. An epoch change, a missing stream while a checkpoint exists, or a
retention gap fails closed (:class:`FeedClosed`): the consumer stops and says why; it never
resets its checkpoint or skips ahead.

    consumer = FeedConsumer(settings, api, FeedState(path, ttl_s=settings.lease_ttl_s), handle)
    code = await consumer.run()
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import re
import sys
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import msgspec

from streamproc import exitcodes
from streamproc.cancellation import checkpoint
from streamproc.client.http import ApiClient, Reply, Unreachable
from streamproc.client.settings import absolute_http_url
from streamproc.client.tokens import TokenRefused, TokenUnavailable
from streamproc.config import ConfigError, Configuration
from streamproc.configfile.registry import env_name
from streamproc.configfile.sections import Notify as NotifySection
from streamproc.names import API_BASE
from streamproc.notify import messages as nm
from streamproc.notify.feed_state import Checkpoint, FeedState, Lease, LeaseLost

TENANT = re.compile(r"^[A-Za-z0-9_-]{1,128}$")
ENV = {
    "base_url": env_name("notify.base_url"),
    "tenants": env_name("notify.tenants"),
    "poll_interval_s": env_name("notify.poll_interval_s"),
    "batch_size": env_name("notify.batch_size"),
    "http_timeout_s": env_name("notify.http_timeout_s"),
    "lease_ttl_s": env_name("notify.lease_ttl_s"),
}
MIN_LEASE_TTL_S = 3.0
MAX_BATCH = 500


class FeedClosed(RuntimeError):
    """The feed cannot be followed from the checkpoint without a gap; the reason says why."""


class FeedRefused(RuntimeError):
    """The feed or the issuer refuses this client (401/403, a refused token)."""


class FeedUnavailable(RuntimeError):
    """The feed cannot answer for now (5xx, no connection): the checkpoint stays."""


class PartitionFailed(RuntimeError):
    """This partition stops at its last successful event for this poll (malformed event,
    tenant mismatch, handler failure, lost lease); the next poll tries again."""


class ConsumerSettings(msgspec.Struct, frozen=True, kw_only=True):
    base_url: str
    tenants: tuple[str, ...]
    kinds: tuple[str, ...] = ("rescan.delta",)
    poll_interval_s: float = 15.0
    batch_size: int = 50
    http_timeout_s: float = 30.0
    lease_ttl_s: float = 120.0


def normalize_tenants(values: list[str]) -> tuple[str, ...]:
    """The allowlist: ASCII letters, digits, ``-`` and ``_``, up to 128 characters, lowered;
    nonempty and distinct."""
    out: list[str] = []
    for v in values:
        t = v.strip()
        if not TENANT.match(t):
            raise ConfigError(
                f"tenant {v!r}: ASCII letters, digits, '-' and '_', 1 to 128 characters"
            )
        if t.lower() in out:
            raise ConfigError(f"tenant {t.lower()} is listed twice (the allowlist is distinct)")
        out.append(t.lower())
    if not out:
        raise ConfigError(
            f"no tenants to follow: list them (--tenant, {ENV['tenants']}); there is no "
            "default or system tenant"
        )
    return tuple(out)


def from_section(
    notify: NotifySection,
    *,
    base_url: str | None,
    tenants: list[str],
    kinds: list[str],
    token_tenant: str | None = None,
) -> ConsumerSettings:
    """The consumer's settings: flags over the typed ``[notify]`` section
    (docs/configuration.md). With a static token and no tenant given, its tenant is the one
    partition."""

    url = base_url or notify.base_url
    if not url:
        raise ConfigError(f"no feed URL: --http URL or {ENV['base_url']}")
    listed = tenants or [t for t in notify.tenants or () if t.strip()]
    if not listed and token_tenant:
        listed = [token_tenant]
    poll, timeout = notify.poll_interval_s, notify.http_timeout_s
    ttl, batch = notify.lease_ttl_s, notify.batch_size
    if poll <= 0:
        raise ConfigError(f"{ENV['poll_interval_s']}={poll:g}: positive seconds")
    if timeout <= 0:
        raise ConfigError(f"{ENV['http_timeout_s']}={timeout:g}: positive seconds")
    if ttl < MIN_LEASE_TTL_S:
        raise ConfigError(f"{ENV['lease_ttl_s']}={ttl:g}: at least {MIN_LEASE_TTL_S:g} seconds")
    if batch != int(batch) or not 1 <= batch <= MAX_BATCH:
        raise ConfigError(f"{ENV['batch_size']}={batch:g}: a whole number from 1 to {MAX_BATCH}")
    for k in kinds:
        if k not in nm.KINDS:
            raise ConfigError(f"unknown kind {k!r}; kinds: {', '.join(nm.KINDS)}")
    return ConsumerSettings(
        base_url=absolute_http_url(f"--http / {ENV['base_url']}", url.rstrip("/")),
        tenants=normalize_tenants(listed),
        kinds=tuple(dict.fromkeys(kinds or ["rescan.delta"])),
        poll_interval_s=poll, batch_size=int(batch), http_timeout_s=timeout, lease_ttl_s=ttl,
    )  # fmt: skip


def load_settings(
    *,
    base_url: str | None,
    tenants: list[str],
    kinds: list[str],
    token_tenant: str | None = None,
    env: Mapping[str, str],
) -> ConsumerSettings:
    """:func:`from_section` with the text of ``env``, decoded as at start (``config check``
    and tests)."""
    return from_section(
        Configuration(values=env).sections.notify,
        base_url=base_url, tenants=tenants, kinds=kinds, token_tenant=token_tenant,
    )  # fmt: skip


Handler = Callable[[nm.AnyMessage, int], "Awaitable[None] | None"]


@dataclass
class Partition:
    tenant: str
    kind: str
    problem: str = ""
    """Why the last poll stopped early (empty: it did not)."""
    outcome: int = exitcodes.OK
    caught_up: bool = False
    lease: Lease | None = None

    @property
    def settled(self) -> bool:
        """Nothing more to do this round: caught up, or stopped until the next poll."""
        return self.caught_up or bool(self.problem)

    def __str__(self) -> str:
        return f"{self.tenant} {self.kind}"


class FeedConsumer:
    def __init__(
        self,
        settings: ConsumerSettings,
        api: ApiClient,
        state: FeedState,
        handler: Handler,
        *,
        say: Callable[[str], None] | None = None,
    ) -> None:
        self.s = settings
        self.api = api
        self.state = state
        self.handler = handler
        self.say = say or (lambda text: print(f"streamproc: {text}", file=sys.stderr, flush=True))
        self.partitions = [Partition(t, k) for t in settings.tenants for k in settings.kinds]

    def _url(self, kind: str, what: str) -> str:
        return f"{self.s.base_url}{API_BASE}/feeds/{kind}/{what}"

    # ------------------------------------------------------------------ HTTP

    async def _call(self, p: Partition, method: str, what: str, **kw: Any) -> Reply:
        try:
            r = await self.api.request(method, self._url(p.kind, what), tenant=p.tenant, **kw)
        except (Unreachable, TokenUnavailable) as exc:
            raise FeedUnavailable(f"the feed cannot be reached: {exc}") from None
        except TokenRefused as exc:
            raise FeedRefused(str(exc)) from None
        if r.status >= 500:
            raise FeedUnavailable(f"the feed answered {r.status}: {r.detail()}")
        if r.status in (401, 403):
            raise FeedRefused(f"the feed refused this client ({r.status}): {r.detail()}")
        return r

    @staticmethod
    def _slug(r: Reply) -> str:
        doc = r.json()
        return str(doc.get("type", "")).rpartition(":")[2] if isinstance(doc, dict) else ""

    def _closed(self, p: Partition, r: Reply, cp: Checkpoint | None) -> None:
        """The answers that end the feed for this checkpoint: fail closed."""
        slug = self._slug(r)
        if r.status == 404 and slug == "stream-missing" and cp is not None:
            raise FeedClosed(f"{p}: the stream is missing while a checkpoint exists "
                             f"(epoch {cp.epoch}, seq {cp.seq})")  # fmt: skip
        if r.status == 409 and slug == "retention-gap":
            raise FeedClosed(f"{p}: retention gap after checkpoint {cp.seq if cp else 0}: "
                             f"{r.detail()}")  # fmt: skip
        if r.status == 409 and slug == "epoch-mismatch":
            raise FeedClosed(f"{p}: the stream's epoch changed (checkpoint epoch "
                             f"{cp.epoch if cp else '?'}): {r.detail()}")  # fmt: skip
        if r.status == 409:
            raise FeedClosed(f"{p}: the checkpoint is no longer valid ({slug}): {r.detail()}")

    async def _report(self, p: Partition, cp: Checkpoint | None) -> Reply:
        body = {"streamEpoch": None, "seq": None} if cp is None else {
            "streamEpoch": cp.epoch, "seq": cp.seq}  # fmt: skip
        r = await self._call(p, "POST", "consumer-checkpoint", json=body)
        self._closed(p, r, cp)
        if r.status != 200:
            raise FeedUnavailable(f"the checkpoint report was answered {r.status}: {r.detail()}")
        doc = r.json()
        if not isinstance(doc, dict) or not isinstance(doc.get("epoch"), int):
            raise PartitionFailed(f"{p}: the checkpoint answer is not one: {r.body[:200]!r}")
        if doc.get("tenant") != p.tenant or doc.get("kind") != p.kind:
            raise PartitionFailed(f"{p}: the checkpoint answer is for {doc.get('tenant')} "
                                  f"{doc.get('kind')}")  # fmt: skip
        return r

    # ------------------------------------------------------------------ one partition

    async def poll(self, p: Partition) -> None:
        """One batch of one partition; raises what stopped it."""
        lease = p.lease = await self.state.acquire(p.tenant, p.kind)
        if lease is None:
            raise PartitionFailed(f"{p}: another consumer on this state holds its lease")
        cp = self.state.checkpoint(p.tenant, p.kind)
        answer = await self._report(p, cp)  # the persisted position, before each batch
        if cp is None:
            cp = Checkpoint(int(answer.json()["epoch"]), 0)
            await self.state.commit(lease, cp, self.s.base_url)
        r = await self._call(p, "GET", "events", params={
            "afterSeq": str(cp.seq), "limit": str(self.s.batch_size),
            "streamEpoch": str(cp.epoch)})  # fmt: skip
        self._closed(p, r, cp)
        if r.status != 200:
            raise FeedUnavailable(f"the feed answered {r.status}: {r.detail()}")
        page = r.json()
        if not isinstance(page, dict) or not isinstance(page.get("events"), list):
            raise PartitionFailed(f"{p}: the feed's answer is not a page: {r.body[:200]!r}")
        if page.get("epoch") != cp.epoch:
            raise FeedClosed(f"{p}: the stream's epoch changed from {cp.epoch} to "
                             f"{page.get('epoch')}")  # fmt: skip
        if page.get("tenant") != p.tenant or page.get("kind") != p.kind:
            raise PartitionFailed(f"{p}: the page is for {page.get('tenant')} "
                                  f"{page.get('kind')}")  # fmt: skip
        try:
            await self._handle_batch(p, lease, cp, page["events"])
        finally:  # after the processed batch (or its part that succeeded): report it
            done = self.state.checkpoint(p.tenant, p.kind)
            if done is not None and done != cp:
                with contextlib.suppress(FeedUnavailable, FeedRefused, PartitionFailed):
                    await self._report(p, done)  # else the next poll's report says it
        p.caught_up = bool(page.get("complete"))

    async def _handle_batch(
        self, p: Partition, lease: Lease, cp: Checkpoint, events: list[dict[str, Any]]
    ) -> Checkpoint:
        renewing = asyncio.create_task(self._keep_lease(lease))
        try:
            for ev in events:
                msg = self._checked(p, cp, ev)
                try:
                    done = self.handler(msg, ev["seq"])
                    if inspect.isawaitable(done):
                        await done
                except Exception as exc:  # the handler's failure: the partition stops here
                    raise PartitionFailed(
                        f"{p}: the handler failed on seq {ev['seq']} ({type(exc).__name__}: "
                        f"{exc}); it stays at {cp.seq}"
                    ) from exc
                if renewing.done():
                    renewing.result()  # raises LeaseLost
                nxt = Checkpoint(cp.epoch, int(ev["seq"]))
                try:
                    await self.state.commit(lease, nxt, self.s.base_url)  # after the effect
                except LeaseLost as exc:
                    raise PartitionFailed(f"{p}: {exc}") from None
                cp = nxt
        finally:
            renewing.cancel()
            with contextlib.suppress(asyncio.CancelledError, LeaseLost):
                await renewing
        return cp

    def _checked(self, p: Partition, cp: Checkpoint, ev: Any) -> nm.AnyMessage:
        """The event's payload, once the envelope and the payload say who and what it is."""
        where = f"{p}: event at seq {ev.get('seq') if isinstance(ev, dict) else '?'}"
        if not isinstance(ev, dict) or not isinstance(ev.get("seq"), int) or ev["seq"] <= cp.seq:
            raise PartitionFailed(f"{where}: malformed envelope (a sequence after {cp.seq})")
        if ev.get("kind") != p.kind:
            raise PartitionFailed(f"{where}: envelope kind {ev.get('kind')!r}, not {p.kind}")
        try:
            msg = nm.decode(msgspec.json.encode(ev.get("payload")))
        except msgspec.DecodeError as exc:
            raise PartitionFailed(f"{where}: malformed payload ({exc})") from None
        if msg.tenant != p.tenant:
            raise PartitionFailed(f"{where}: payload tenant {msg.tenant!r}, not {p.tenant}")
        if nm.kind_of(msg) != p.kind or msg.id != ev.get("id"):
            raise PartitionFailed(f"{where}: payload {nm.kind_of(msg)} {msg.id!r} does not match "
                                  f"the envelope's {p.kind} {ev.get('id')!r}")  # fmt: skip
        return msg

    async def _keep_lease(self, lease: Lease) -> None:
        """Renew the partition's lease while its batch is handled."""
        while True:
            await asyncio.sleep(self.s.lease_ttl_s / 3)
            await self.state.renew(lease)

    # ------------------------------------------------------------------ the loop

    async def round(self) -> int:
        """One poll of every partition: batches until each is caught up or stopped for now
        (a stopped one is tried again next round, the others go on). Answers the worst
        partition's code: 0, 1 (the feed, an event or a handler failed), 2 (refused)."""
        for p in self.partitions:
            p.problem, p.outcome, p.caught_up = "", exitcodes.OK, False
        while pending := [p for p in self.partitions if not p.settled]:
            for p in pending:
                try:
                    await self.poll(p)
                except (FeedRefused, FeedUnavailable, PartitionFailed) as exc:
                    p.problem = str(exc) if str(exc).startswith(str(p)) else f"{p}: {exc}"
                    p.outcome = exitcodes.known(exc)
                    self.say(f"{p.problem} (progress kept at its last successful event)")
        return max(p.outcome for p in self.partitions)

    async def run(self, *, once: bool = False) -> int:
        """Poll every ``poll_interval_s`` until stopped; with ``once``, one round and its
        exit code. :class:`FeedClosed` ends it (exit code 3)."""
        try:
            async with self.api:
                while True:
                    checkpoint()  # a stop a library call below dropped
                    code = await self.round()
                    if once:
                        return code
                    await asyncio.sleep(self.s.poll_interval_s)
        finally:  # a restart may take the partitions at once (after a crash: after the TTL)
            for p in self.partitions:
                if p.lease is not None:
                    with contextlib.suppress(OSError):
                        await self.state.release(p.lease)
