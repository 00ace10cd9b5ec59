"""``streamproc feedser export --osv DIR``: new or changed advisories → the signed Feedser
webhook, as an advisory aggregator would send it.

A state file remembers each advisory's content digest from the last successful export, so
only new or changed OSV records go out: their product keys (version-less purls, Debian source
packages expanded to their binary packages), the KEV ids among them, and one entry per
advisory (vulnId, productKeys, severity, kev, and its EPSS when an EPSS file is given). The
export id is derived from the content, and the body being sent is kept in the state file as
``pending`` until the gateway accepts it, so a retry after a refusal or a lost answer sends
the very same body again (its ``window`` included), which the gateway recognises as the same
export. The body is signed ``sha256=HMAC(secret, timestamp + "." + body)`` (or Ed25519), the
gateway's scheme, and sent with a DPoP-bound access token per tenant (:mod:`.sender_auth`).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import json
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
from nacl.signing import SigningKey

from streamproc.client.http import ApiClient
from streamproc.scanner.advisories import Advisory, AdvisoryDb
from streamproc.scanner.sender_auth import Credentials

WEBHOOK_PATH = "/api/v1/scheduler/events/feedser-export"


def load_state(path: Path | None) -> dict[str, Any]:
    if path is None or not path.exists():
        return {"advisories": {}, "exportedAt": None}
    return dict(json.loads(path.read_text()))


def build_export(
    db: AdvisoryDb, state: dict[str, Any], now: float | None = None
) -> dict[str, Any] | None:
    """The webhook body for what changed since ``state``, or None when nothing did: the
    state's ``pending`` body when it is that same change (sent, never accepted)."""
    known: dict[str, str] = state.get("advisories", {})
    changed = [a for a in sorted(db.advisories.values(), key=lambda a: a.id)
               if known.get(a.id) != a.digest]  # fmt: skip
    if not changed:
        return None
    body = export_of(db, changed)
    pending = state.get("pending")
    if isinstance(pending, dict) and pending.get("exportId") == body["exportId"]:
        return pending
    to = datetime.fromtimestamp(now if now is not None else time.time(), UTC)
    body["window"] = {"from": state.get("exportedAt"), "to": to.strftime("%Y-%m-%dT%H:%M:%SZ")}
    return body


def entry_of(db: AdvisoryDb, a: Advisory) -> dict[str, Any]:
    """One advisory as an export lists it: vulnId, productKeys, severity, kev, and its EPSS
    when one of its CVEs is scored."""
    entry: dict[str, Any] = {
        "vulnId": a.id,
        "productKeys": db.product_keys(a),
        "severity": a.severity,
        "kev": a.kev,
    }
    epss = db.epss_of(a)
    if epss is not None:
        entry["epss"] = {"score": epss.score, "percentile": epss.percentile, "date": epss.date}
    return entry


def export_of(db: AdvisoryDb, changed: list[Advisory]) -> dict[str, Any]:
    """The export of ``changed`` advisories (in this order), without a window: every field
    derived from their content, the exportId included (``osv-`` and a hash of each one's id
    and digest), so the same change always makes the same body."""
    h = hashlib.sha256()
    for a in changed:
        h.update(f"{a.id}={a.digest};".encode())
    keys: set[str] = set()
    entries = []
    kev: set[str] = set()
    for a in changed:
        entry = entry_of(db, a)
        keys.update(entry["productKeys"])
        if a.kev:
            kev.update(c for c in a.cves if c in db.kev)
        entries.append(entry)
    return {
        "exportId": "osv-" + h.hexdigest()[:24],
        "changedProductKeys": sorted(keys),
        "kev": sorted(kev),
        "advisories": entries,
    }


def sending_state(state: dict[str, Any], body: dict[str, Any]) -> dict[str, Any]:
    """What the state file says while ``body`` is on its way: unchanged, and ``pending``."""
    return {**state, "pending": body}


def next_state(db: AdvisoryDb, body: dict[str, Any]) -> dict[str, Any]:
    """Once the gateway accepted ``body``: every advisory as exported, nothing pending."""
    return {
        "advisories": {a.id: a.digest for a in db.advisories.values()},
        "exportedAt": body["window"]["to"],
        "lastExportId": body["exportId"],
    }


def signed_headers(
    body: bytes,
    delivery: str,
    *,
    secret: str | None = None,
    ed25519_seed: bytes | None = None,
    source: str | None = None,
    ts: int | None = None,
) -> dict[str, str]:
    """``X-Scheduler-*`` headers: signature over ``timestamp + "." + body``."""
    stamp = str(ts if ts is not None else int(time.time()))
    signed = stamp.encode() + b"." + body
    sigs = []
    if secret:
        sigs.append("sha256=" + hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest())
    if ed25519_seed:
        sig = SigningKey(ed25519_seed).sign(signed).signature
        sigs.append("ed25519=" + base64.urlsafe_b64encode(sig).decode().rstrip("="))
    if not sigs:
        raise ValueError("a signed webhook needs an HMAC secret or an Ed25519 key")
    headers = {
        "Content-Type": "application/json",
        "X-Scheduler-Signature": ",".join(sigs),
        "X-Scheduler-Timestamp": stamp,
        "X-Scheduler-Delivery": delivery,
    }
    if source:
        headers["X-Scheduler-Source"] = source
    return headers


async def post_export(
    url: str,
    body: dict[str, Any],
    headers_for: Any,
    timeout_s: float = 30.0,
    *,
    api: ApiClient | None = None,
    tenant: str | None = None,
    path: str = WEBHOOK_PATH,
    delivery: str | None = None,
) -> tuple[int, Any]:
    """One delivery of ``body``, signed by ``headers_for(raw, delivery_id)``; with ``api``,
    also with its DPoP-bound token for ``tenant`` (the nonce challenge answered by sending
    the same delivery again: a refused delivery id is not used up)."""
    raw = json.dumps(body, separators=(",", ":")).encode()
    delivery = delivery or f"{body['exportId'][:64]}.{int(time.time() * 1000)}"
    target = url.rstrip("/") + path
    headers = dict(headers_for(raw, delivery))
    if api is not None:
        reply = await api.request("POST", target, tenant=tenant, data=raw, headers=headers)
        return reply.status, reply.json()
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    async with (
        aiohttp.ClientSession(timeout=timeout) as s,
        s.post(target, data=raw, headers=headers) as r,
    ):
        text = await r.read()
        try:
            return r.status, json.loads(text)
        except ValueError:
            return r.status, text.decode(errors="replace")


async def deliver_export(
    url: str,
    body: dict[str, Any],
    headers_for: Any,
    creds: Credentials,
    timeout_s: float = 30.0,
    *,
    path: str = WEBHOOK_PATH,
) -> list[tuple[str | None, int, Any]]:
    """One delivery to ``path`` (Feedser's webhook by default) per tenant of ``creds`` (each
    its own delivery id, one DPoP session for all): every tenant's (tenant, status, answer),
    in order. No answer at all raises (:class:`~streamproc.client.http.Unreachable`, or an
    :mod:`aiohttp` error without a token), and the tenants after it are not sent."""
    stamp = int(time.time() * 1000)
    out: list[tuple[str | None, int, Any]] = []
    async with contextlib.AsyncExitStack() as stack:
        api = None
        if creds.tokens is not None and creds.key is not None:
            client = ApiClient(creds.key, creds.tokens, timeout_s=timeout_s)
            api = await stack.enter_async_context(client)
        for n, tenant in enumerate(creds.tenants):
            delivery = f"{body['exportId'][:64]}.{stamp}.{n}"
            status, answer = await post_export(
                url,
                body,
                headers_for,
                timeout_s,
                api=api,
                tenant=tenant,
                path=path,
                delivery=delivery,
            )
            out.append((tenant, status, answer))
    return out
