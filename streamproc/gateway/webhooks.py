"""Authenticating webhook deliveries from Feedser and Vexer.

The sender signs ``timestamp + "." + body`` (the exact body bytes on the wire) with
HMAC-SHA256 (``sha256=<hex>``) or Ed25519 (``ed25519=<base64>``) and sends it in
``X-Scheduler-Signature`` with ``X-Scheduler-Timestamp`` (Unix seconds) and a unique
``X-Scheduler-Delivery``. A source may instead be authenticated by its TLS client
certificate. Signatures are compared in constant time; several secrets or public keys per
source are accepted at once, for rotation.

A delivery id is looked up in the bucket every gateway replica shares
(:mod:`streamproc.gateway.replay`) before anything else is done (a replay: 409, nothing
published), and claimed there once its export is recorded. Recording is idempotent (derived
event ids, create-only subjects), so claiming after it means a 409 always says "received and
recorded": a delivery that failed on its way (a 5xx, an acknowledgement lost in an election)
is never claimed, and its retry succeeds on any replica.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from nacl.exceptions import BadSignatureError
from nacl.signing import VerifyKey

from streamproc.gateway.jwt import decode_key
from streamproc.gateway.replay import Replayed, ReplayGuard
from streamproc.gateway.settings import GatewaySettings, WebhookSource, resolve_ref
from streamproc.gateway.tls import ca_subjects, names_of, peer_cert_der, peer_cert_info
from streamproc.ids import ascii_int
from streamproc.problems import ProblemError

SIGNATURE = "X-Scheduler-Signature"
TIMESTAMP = "X-Scheduler-Timestamp"
DELIVERY = "X-Scheduler-Delivery"
SOURCE = "X-Scheduler-Source"
_DELIVERY_RE = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
_MAX_SIGNATURES = 8


class Source:
    """A configured sender with its keys resolved once (not per request)."""

    def __init__(self, cfg: WebhookSource) -> None:
        self.name = cfg.name
        self.kind = cfg.kind
        self.tenants = list(cfg.tenants)
        self.hmac_keys = [resolve_ref(s).encode() for s in cfg.hmac_secrets]
        self.ed_keys = [VerifyKey(decode_key(resolve_ref(k))) for k in cfg.ed25519_public_keys]
        self.mtls = cfg.mtls
        self.ca_subjects: list[Any] = []
        if cfg.mtls and cfg.mtls.ca_file:
            self.ca_subjects = ca_subjects(cfg.mtls.ca_file)
        self.fingerprints = (
            {f.lower().replace(":", "") for f in cfg.mtls.sha256} if cfg.mtls else set()
        )

    def signature_ok(self, header: str, signed: bytes) -> bool:
        ok = False
        for part in header.split(",")[:_MAX_SIGNATURES]:
            scheme, _, value = part.strip().partition("=")
            if scheme == "sha256" and self.hmac_keys:
                try:
                    given = bytes.fromhex(value)
                except ValueError:
                    continue
                for key in self.hmac_keys:
                    # Every key is tried (no early exit) so timing says nothing about which.
                    ok |= hmac.compare_digest(hmac.new(key, signed, hashlib.sha256).digest(), given)
            elif scheme == "ed25519" and self.ed_keys:
                try:
                    sig = base64.b64decode(value + "=" * (-len(value) % 4), altchars=b"-_")
                except (binascii.Error, ValueError):
                    continue
                if len(sig) != 64:
                    continue
                for vk in self.ed_keys:
                    try:
                        vk.verify(signed, sig)
                        ok = True
                    except BadSignatureError:
                        pass
        return ok

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


class WebhookVerifier:
    def __init__(
        self, s: GatewaySettings, replay: ReplayGuard, clock: Callable[[], float] = time.time
    ) -> None:
        self.window = s.webhook_window_s
        self._clock = clock
        self.sources = [Source(c) for c in s.webhooks]
        self.replay = replay

    def select(self, request: web.Request, kind: str) -> Source:
        """The source a delivery claims to be (``X-Scheduler-Source``, or the only one)."""
        candidates = [s for s in self.sources if s.kind == kind]
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

    def authenticate(self, request: web.Request, source: Source, body: bytes) -> Delivery:
        """Check signature (or client certificate), time window and the source's share of
        the replay bucket; the delivery to :meth:`remember` once its export is recorded."""
        h = request.headers
        ts_text = h.get(TIMESTAMP, "")
        delivery = h.get(DELIVERY, "")
        if ascii_int(ts_text, 12) is None:
            raise ProblemError(401, "bad-signature", f"{TIMESTAMP} must be Unix seconds")
        if not _DELIVERY_RE.match(delivery):
            raise ProblemError(
                401, "bad-signature", f"{DELIVERY} must be 1-128 characters of [A-Za-z0-9._:-]"
            )
        sig = h.get(SIGNATURE)
        if sig:
            signed = ts_text.encode() + b"." + body
            if not source.signature_ok(sig, signed):
                raise ProblemError(401, "bad-signature", "signature does not verify")
        elif not source.certificate_ok(request):
            raise ProblemError(
                401,
                "bad-signature",
                f"{SIGNATURE} is required"
                + (" (or a valid client certificate)" if source.mtls else ""),
            )
        ts = int(ts_text)
        now = self._clock()
        if abs(now - ts) > self.window:
            raise ProblemError(
                401, "stale-delivery", f"timestamp is more than {self.window} s from server time"
            )
        self.replay.share.check(source.name)
        return Delivery(source.name, delivery, ts + self.window + 1)

    async def refuse_seen(self, d: Delivery) -> None:
        """409 at once for a delivery id claimed before, so a replay publishes nothing."""
        if await self.replay.seen("webhook", d.source, d.id):
            raise _replayed(d)

    async def remember(self, d: Delivery) -> None:
        """Claim the delivery id until it could no longer pass the time window; 409 if any
        replica claimed it before."""
        try:
            await self.replay.claim("webhook", d.source, d.id, d.expires_at)
        except Replayed:
            raise _replayed(d) from None


def _replayed(d: Delivery) -> ProblemError:
    return ProblemError(409, "replayed-delivery", f"delivery {d.id} was already received")


@dataclass(frozen=True)
class Delivery:
    source: str
    id: str
    expires_at: float
