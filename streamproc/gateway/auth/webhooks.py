"""Authenticating webhook deliveries from Feedser and Vexer.

The sender signs ``timestamp + "." + body`` (the exact body bytes on the wire) with
HMAC-SHA256 (``sha256=<hex>``) or Ed25519 (``ed25519=<base64>``) and sends it in
``X-Scheduler-Signature`` with ``X-Scheduler-Timestamp`` (Unix seconds) and a unique
``X-Scheduler-Delivery``. A source may instead be authenticated by its TLS client
certificate. Several secrets or public keys per source are accepted at once, for rotation.

Hashing a body is the one expensive thing a caller without credentials can ask for, so it
comes last: the timestamp window, the delivery id, the signature header's shape, the
source's share of the replay bucket and the replay look-up are all checked first, from the
headers alone — a stale, replayed or malformed delivery is refused before its body is read.
Then the body is hashed once per configured secret or key, never once per signature sent: a
``sha256`` header may carry up to :data:`MAX_SIGNATURE_PARTS` values (each secret's MAC is
compared with each, in constant time), an ``ed25519`` header one signature. Bodies larger
than :data:`INLINE_VERIFY_MAX` are hashed on a worker thread (the event loop serves every
role of the process), and at most :data:`LARGE_IN_FLIGHT` large deliveries are read and
verified at once (503 ``busy`` beyond).

A delivery id is looked up in the bucket every gateway replica shares
(:mod:`streamproc.gateway.auth.replay`) before anything else is done (a replay: 409, nothing
published), and claimed there once its export is recorded. Recording is idempotent (an export
is appended to the log at most once), so claiming after it means a 409 always says "received and
recorded": a delivery that failed on its way (a 5xx, an acknowledgement lost in an election)
is never claimed, and its retry succeeds on any replica.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import hmac
import logging
import re
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from nacl.exceptions import BadSignatureError
from nacl.signing import VerifyKey

from streamproc.gateway.auth.jwt import decode_key
from streamproc.gateway.auth.replay import Replayed, ReplayGuard
from streamproc.gateway.auth.tls import ca_subjects, names_of, peer_cert_der, peer_cert_info
from streamproc.gateway.hardening import read_body
from streamproc.gateway.settings import GatewaySettings, WebhookSource, resolve_ref
from streamproc.ids import ascii_int
from streamproc.problems import ProblemError

SIGNATURE = "X-Scheduler-Signature"
TIMESTAMP = "X-Scheduler-Timestamp"
DELIVERY = "X-Scheduler-Delivery"
SOURCE = "X-Scheduler-Source"
log = logging.getLogger("streamproc.gateway.webhooks")  # the name log filters know it by
_DELIVERY_RE = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
_HEX_MAC = re.compile(r"^[0-9a-fA-F]{64}$")
_B64_SIG = re.compile(r"^[A-Za-z0-9+/_-]{86}(==)?$")
MAX_SIGNATURE_PARTS = 4
"""Most comma-separated values one signature header may carry (refused, unhashed, beyond)."""
INLINE_VERIFY_MAX = 64 * 1024
"""Signed bytes up to this are verified on the event loop (microseconds); more on a thread."""
LARGE_BODY = 1024 * 1024
"""A delivery that declares more (or no length) is large: bounded by LARGE_IN_FLIGHT."""
LARGE_IN_FLIGHT = 4
VERIFY_THREADS = 2
_pool: ThreadPoolExecutor | None = None


def _bad(detail: str) -> ProblemError:
    return ProblemError(401, "bad-signature", detail)


@dataclass(frozen=True)
class Signatures:
    """A signature header, read for its shape only (nothing hashed yet)."""

    macs: tuple[bytes, ...]
    """``sha256`` values: HMAC-SHA256 digests."""
    ed25519: bytes | None
    """The one ``ed25519`` signature, if sent."""


def parse_signatures(header: str) -> Signatures:
    """Read ``X-Scheduler-Signature``; a header that could not verify is refused here."""
    parts = header.split(",")
    if len(parts) > MAX_SIGNATURE_PARTS:
        raise _bad(f"{SIGNATURE} carries {len(parts)} values; at most {MAX_SIGNATURE_PARTS}")
    macs: list[bytes] = []
    ed: bytes | None = None
    for part in parts:
        scheme, _, value = part.strip().partition("=")
        if scheme == "sha256":
            if not _HEX_MAC.match(value):
                raise _bad("a sha256 signature is 64 hex digits")
            macs.append(bytes.fromhex(value))
        elif scheme == "ed25519":
            if ed is not None:
                raise _bad("send one ed25519 signature; it is tried with each configured key")
            ed = _ed25519(value)
        # Any other scheme is not ours to judge: a sender may add one before we know it.
    if not macs and ed is None:
        raise _bad(f"{SIGNATURE} has no sha256 or ed25519 signature")
    return Signatures(tuple(macs), ed)


def _ed25519(value: str) -> bytes:
    if _B64_SIG.match(value):
        try:
            sig = base64.b64decode(value + "=" * (-len(value) % 4), altchars=b"-_")
        except (binascii.Error, ValueError):
            sig = b""
        if len(sig) == 64:
            return sig
    raise _bad("an ed25519 signature is 64 bytes in base64 or base64url")


class Source:
    """A configured sender with its keys resolved once (not per request)."""

    def __init__(self, cfg: WebhookSource, env: Mapping[str, str]) -> None:
        self.name = cfg.name
        self.kind = cfg.kind
        self.tenants = list(cfg.tenants)
        self.hmac_keys = [resolve_ref(s, env).encode() for s in cfg.hmac_secrets]
        self.ed_keys = [VerifyKey(decode_key(resolve_ref(k, env))) for k in cfg.ed25519_public_keys]
        self.mtls = cfg.mtls
        self.require_token = cfg.require_token
        self.ca_subjects: list[Any] = []
        if cfg.mtls and cfg.mtls.ca_file:
            self.ca_subjects = ca_subjects(cfg.mtls.ca_file)
        self.fingerprints = (
            {f.lower().replace(":", "") for f in cfg.mtls.sha256} if cfg.mtls else set()
        )

    def can_verify(self, sigs: Signatures) -> bool:
        """Whether any signature sent is of a scheme this source has keys for."""
        return bool((sigs.macs and self.hmac_keys) or (sigs.ed25519 and self.ed_keys))

    def signature_ok(self, sigs: Signatures, signed: bytes) -> bool:
        """Hash ``signed`` once per secret or key of the schemes sent (no more, whatever the
        header says); within a scheme every key is tried, so timing tells nothing of which."""
        if sigs.macs and self.hmac_keys:
            ok = False
            for key in self.hmac_keys:
                mac = hmac.digest(key, signed, "sha256")
                for given in sigs.macs:
                    ok |= hmac.compare_digest(mac, given)
            if ok:
                return True
        if sigs.ed25519 is not None:
            ok = False
            for vk in self.ed_keys:
                try:
                    vk.verify(signed, sigs.ed25519)
                    ok = True
                except BadSignatureError:
                    pass
            return ok
        return False

    def certificate_ok(self, request: web.Request) -> bool:
        if self.mtls is None:
            return False
        info = peer_cert_info(request)
        if not info:
            return False  # no certificate, or not verified by a configured CA
        if self.ca_subjects and info.get("issuer") not in self.ca_subjects:
            return False
        if self.fingerprints:
            der = peer_cert_der(request) or b""
            if hashlib.sha256(der).hexdigest() in self.fingerprints:
                return True
            if not self.mtls.subjects:
                return False
        return not self.mtls.subjects or bool(names_of(info) & set(self.mtls.subjects))


@dataclass(frozen=True)
class Delivery:
    source: str
    id: str
    expires_at: float
    timestamp: str
    """``X-Scheduler-Timestamp`` as sent: the signed bytes begin with it."""
    signatures: Signatures | None
    """None: the sender was authenticated by its client certificate."""


class WebhookVerifier:
    def __init__(
        self,
        s: GatewaySettings,
        replay: ReplayGuard,
        clock: Callable[[], float] = time.time,
        env: Mapping[str, str] | None = None,
    ) -> None:
        """``env``: what ``env:NAME`` secret references name (the process's configuration)."""
        self.window = s.webhook_window_s
        self._clock = clock
        self.sources = [Source(c, env or {}) for c in s.webhooks]
        for source in self.sources:
            if not source.require_token:
                log.warning(
                    "webhook source %s takes no access token (require_token = false): its "
                    "signature alone records exports for every tenant it lists (%s); see "
                    "docs/security.md",
                    source.name,
                    ", ".join(source.tenants),
                )
        self._by_kind = {k: [s for s in self.sources if s.kind == k] for k in ("feedser", "vexer")}
        self.replay = replay
        self.large_in_flight = 0

    def select(self, request: web.Request, kind: str) -> Source:
        """The source a delivery claims to be (``X-Scheduler-Source``, or the only one)."""
        candidates = self._by_kind.get(kind, [])
        name = request.headers.get(SOURCE)
        if name is not None:
            for s in candidates:
                if s.name == name:
                    return s
            raise ProblemError(401, "unknown-source", f"no {kind} webhook source named {name!r}")
        if len(candidates) == 1:
            return candidates[0]
        if not candidates:
            raise ProblemError(401, "unknown-source", f"no {kind} webhook source is configured")
        raise ProblemError(
            401, "unknown-source", f"several {kind} sources are configured; send {SOURCE}"
        )

    def admit(self, request: web.Request, source: Source) -> Delivery:
        """Everything that can be checked from the headers, cheapest first: timestamp and
        its window, delivery id, signature header (or the client certificate), the source's
        share of the replay bucket. Nothing is hashed and the body is not read."""
        h = request.headers
        ts_text = h.get(TIMESTAMP, "")
        ts = ascii_int(ts_text, 12)
        if ts is None:
            raise _bad(f"{TIMESTAMP} must be Unix seconds")
        if abs(self._clock() - ts) > self.window:
            raise ProblemError(
                401, "stale-delivery", f"timestamp is more than {self.window} s from server time"
            )
        delivery = h.get(DELIVERY, "")
        if not _DELIVERY_RE.match(delivery):
            raise _bad(f"{DELIVERY} must be 1-128 characters of [A-Za-z0-9._:-]")
        header = h.get(SIGNATURE)
        sigs: Signatures | None = None
        if header:
            sigs = parse_signatures(header)
            if not source.can_verify(sigs):
                raise _bad(f"source {source.name} has no key for the signature schemes sent")
        elif not source.certificate_ok(request):
            raise _bad(
                f"{SIGNATURE} is required"
                + (" (or a valid client certificate)" if source.mtls else "")
            )
        self.replay.share.check(source.name)
        return Delivery(source.name, delivery, ts + self.window + 1, ts_text, sigs)

    async def refuse_seen(self, d: Delivery) -> None:
        """409 at once for a delivery id claimed before, so a replay publishes nothing."""
        if await self.replay.seen("webhook", d.source, d.id):
            raise _replayed(d)

    async def read_signed(
        self, request: web.Request, source: Source, d: Delivery, cap: int
    ) -> bytes:
        """The body, read and its signature verified; a large one only while fewer than
        :data:`LARGE_IN_FLIGHT` others are, and hashed off the event loop."""
        declared = request.content_length
        if declared is not None and declared <= LARGE_BODY:
            body = await read_body(request, cap)
            await self._verify(source, d, body)
            return body
        if self.large_in_flight >= LARGE_IN_FLIGHT:
            raise ProblemError(
                503,
                "busy",
                f"{LARGE_IN_FLIGHT} large deliveries are being received; retry",
                headers={"Retry-After": "1"},
            )
        self.large_in_flight += 1
        try:
            body = await read_body(request, cap)
            await self._verify(source, d, body)
            return body
        finally:
            self.large_in_flight -= 1

    async def _verify(self, source: Source, d: Delivery, body: bytes) -> None:
        if d.signatures is None:
            return  # authenticated by its certificate in admit()
        signed = d.timestamp.encode() + b"." + body
        if len(signed) <= INLINE_VERIFY_MAX:
            ok = source.signature_ok(d.signatures, signed)
        else:
            loop = asyncio.get_running_loop()
            ok = await loop.run_in_executor(
                _verify_pool(), source.signature_ok, d.signatures, signed
            )
        if not ok:
            raise _bad("signature does not verify")

    async def remember(self, d: Delivery) -> None:
        """Claim the delivery id until it could no longer pass the time window; 409 if any
        replica claimed it before."""
        try:
            await self.replay.claim("webhook", d.source, d.id, d.expires_at)
        except Replayed:
            raise _replayed(d) from None


def _verify_pool() -> ThreadPoolExecutor:
    """Threads for large bodies: hashlib and libsodium release the GIL while they hash."""
    global _pool
    if _pool is None:
        _pool = ThreadPoolExecutor(VERIFY_THREADS, thread_name_prefix="webhook-verify")
    return _pool


def _replayed(d: Delivery) -> ProblemError:
    return ProblemError(409, "replayed-delivery", f"delivery {d.id} was already received")
