"""Feed registrations: each (tenant, kind) consumer's reported position, shared by every
gateway replica in the JetStream KV bucket ``<prefix>_feed`` and kept for the lease.

A registration is what the consumer last reported with ``POST …/consumer-checkpoint``: the
epoch and sequence of its durable checkpoint, who reported it, since when its hold is
unbroken (``held_after`` and ``hold_created``: the holding consumer of
:mod:`.retention` and the position from which it has held every message of the subject), and
how far past ``seq`` the feed could *vouch* that no message of that tenant and kind existed
(``vouched``, checked against the stream leader when it was reported). The bucket's
``max_age`` is the lease (``notify.feed_lease_s``, default 24 h), like the holding
consumer's ``inactive_threshold``: a registration nobody renews disappears, and its hold
with it — as the consumer contract says, a stopped consumer can outlive that protection.

Only the configured consumer client identities (``notify.consumer_client_ids``, matched
against the token's ``client_id``, ``azp`` or ``sub``) may register or report.
"""

from __future__ import annotations

from collections.abc import Mapping

import msgspec
import nats.errors
import nats.js.errors
from nats.js.kv import KeyValue

from streamproc.bus import jsapi
from streamproc.bus.fastclient import FastClient
from streamproc.config import ConfigError, Configuration
from streamproc.configfile.registry import env_name
from streamproc.configfile.sections import Sections
from streamproc.names import feed_bucket

bucket_name = feed_bucket

LEASE_ENV = env_name("notify.feed_lease_s")
CONSUMERS_ENV = env_name("notify.consumer_client_ids")
DEFAULT_LEASE_S = 86_400.0
MIN_LEASE_S = 3.0
DEFAULT_CONSUMERS = ("streamproc-notify",)
KV_FAILURES = (nats.errors.Error, TimeoutError, OSError)
"""What a KV call fails with while NATS or the bucket's stream is unavailable."""


class FeedSettings(msgspec.Struct, frozen=True, kw_only=True):
    lease_s: float = DEFAULT_LEASE_S
    consumer_client_ids: tuple[str, ...] = DEFAULT_CONSUMERS


def from_sections(sections: Sections) -> FeedSettings:
    """``notify.feed_lease_s`` (at least 3 s, checked at start; at most a year, here) and
    ``notify.consumer_client_ids`` from the typed ``[notify]`` section."""
    notify = sections.notify
    lease = notify.feed_lease_s
    if not MIN_LEASE_S <= lease <= 366 * 86_400:
        shown = int(lease) if lease.is_integer() else lease
        raise ConfigError(f"{LEASE_ENV}='{shown}': seconds, at least {MIN_LEASE_S:g}")
    return FeedSettings(lease_s=lease, consumer_client_ids=tuple(notify.consumer_client_ids))


def load_settings(env: Mapping[str, str]) -> FeedSettings:
    """:func:`from_sections` with the text of ``env``, decoded as at start (``config check``
    and tests)."""
    return from_sections(Configuration(values=env).sections)


class Registration(msgspec.Struct, kw_only=True):
    consumer: str
    """The client identity that reported it."""
    epoch: int
    seq: int
    held_after: int
    """Every message of the subject after this sequence has been held since ``hold_created``."""
    hold_created: str
    vouched: int
    reported_ms: int


class RegistryUnavailable(RuntimeError):
    """The registration bucket cannot be read or written now (NATS, an election)."""


_decode = msgspec.json.Decoder(Registration).decode


class Registrations:
    """The bucket, opened (created, or its lease updated) on first use."""

    def __init__(self, nc: FastClient, prefix: str, events_stream: str, lease_s: float) -> None:
        self.nc = nc
        self.prefix = prefix
        self.events_stream = events_stream
        self.lease_s = lease_s
        self._kv: KeyValue | None = None

    async def _bucket(self) -> KeyValue:
        if self._kv is not None:
            return self._kv
        js = self.nc.jetstream()
        name = bucket_name(self.prefix)
        try:
            kv = await js.key_value(name)
        except nats.js.errors.BucketNotFoundError:
            replicas = await jsapi.stream_replicas(self.nc, self.events_stream)
            try:
                kv = await js.create_key_value(
                    bucket=name, history=1, ttl=self.lease_s, replicas=replicas,
                    description="streamproc Notify feed registrations (consumer positions)",
                )  # fmt: skip
            except nats.js.errors.Error:  # another replica created it first
                kv = await js.key_value(name)
        info = await jsapi.stream_info(self.nc, f"KV_{name}")
        lease_ns = int(self.lease_s * 1e9)
        if info is not None and info.config.get("max_age") != lease_ns:
            await jsapi.request(
                self.nc, f"STREAM.UPDATE.KV_{name}", {**info.config, "max_age": lease_ns}
            )
        self._kv = kv
        return kv

    @staticmethod
    def key(tenant: str, kind: str) -> str:
        return f"{tenant}.{kind}"

    async def get(self, tenant: str, kind: str) -> Registration | None:
        try:
            kv = await self._bucket()
            entry = await kv.get(self.key(tenant, kind))
        except nats.js.errors.KeyNotFoundError:
            return None
        except (jsapi.JsApiError, *KV_FAILURES) as exc:
            raise RegistryUnavailable(f"feed registrations: {exc or type(exc).__name__}") from exc
        if not entry.value:
            return None
        try:
            return _decode(entry.value)
        except msgspec.DecodeError:  # an older version's record: it vouches for nothing
            return None

    async def put(self, tenant: str, kind: str, reg: Registration) -> None:
        try:
            kv = await self._bucket()
            await kv.put(self.key(tenant, kind), msgspec.json.encode(reg))
        except (jsapi.JsApiError, *KV_FAILURES) as exc:
            raise RegistryUnavailable(f"feed registrations: {exc or type(exc).__name__}") from exc
