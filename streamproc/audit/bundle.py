"""Offline merge: a signed bundle of one tenant's events, exported from one installation and
imported into another.

A bundle is a DSSE envelope (payload type :data:`BUNDLE_PAYLOAD_TYPE`) over JSON holding the
tenant's events verbatim — the original envelopes with their ids and HLCs, in the exporter's
stream order — and the exporter's chain head. ``audit.snapshot`` events stay behind: they
attest the exporter's own chain positions, signed with its own key.

Import verifies the signature against trusted keys, refuses the whole bundle if any event is
malformed, of another tenant, or too far ahead of the local clock (all-or-nothing keeps the
result deterministic), checks that a full bundle reproduces the exporter's chain head, then
publishes the events that are not in the local log yet, in HLC order, with their original ids
(``Nats-Msg-Id``): importing the same bundle again publishes nothing.
"""

from __future__ import annotations

import contextlib
import time
from itertools import pairwise

import msgspec

from streamproc import metrics
from streamproc.audit.dsse import DsseError, Keyring, Signer, decode_envelope, verify
from streamproc.audit.entry import CHAINED_KINDS, SNAPSHOT_KIND, make_entry
from streamproc.audit.layout import Head
from streamproc.bus import jsapi
from streamproc.bus.fastclient import FastClient
from streamproc.bus.publisher import Publisher
from streamproc.bus.pull import PullLoop
from streamproc.events.catalog import subject_for
from streamproc.events.envelope import Envelope, EventError, decode
from streamproc.hlc import Timestamp, sort_key
from streamproc.names import tenant_events

BUNDLE_PAYLOAD_TYPE = "application/vnd.streamproc.audit.bundle+json"
BUNDLE_FORMAT = "streamproc.audit.bundle/v1"


class BundleError(ValueError):
    """The bundle was refused; nothing was published."""


class BundleHead(msgspec.Struct, kw_only=True):
    entries: int
    head_chain_link: str | None
    head_hlc: str | None


class BundleBody(msgspec.Struct, kw_only=True):
    format: str = BUNDLE_FORMAT
    tenant: str
    since: str | None
    exported_by: str
    exported_hlc: str
    chain_head: BundleHead | None
    events: list[msgspec.Raw]


class ImportReport(msgspec.Struct, kw_only=True):
    tenant: str
    exported_by: str
    key_id: str
    events: int
    published: int
    already_present: int
    duplicates: int
    order_preserved: bool
    chain_head_checked: bool


class _Id(msgspec.Struct):
    id: str = ""


_id_decoder = msgspec.json.Decoder(_Id)


async def read_tenant_messages(
    nc: FastClient, stream: str, prefix: str, tenant: str, *, idle_s: float = 10.0
) -> list[bytes]:
    """Every message of ``tenant`` on the event log, in stream order, up to the log's end when
    called (an ephemeral consumer filtered on ``<prefix>.events.<tenant>.>``)."""
    name = f"bundle_{tenant}_{time.time_ns()}".replace("-", "_")
    info = await jsapi.create_consumer(
        nc,
        stream,
        {
            "name": name,
            "filter_subject": tenant_events(prefix, tenant),
            "deliver_policy": "all",
            "ack_policy": "none",
            "replay_policy": "instant",
            "inactive_threshold": 30 * 1_000_000_000,
        },
    )
    want = int(info.get("num_pending", 0))
    out: list[bytes] = []
    if want == 0:
        with contextlib.suppress(jsapi.JsApiError):
            await jsapi.delete_consumer(nc, stream, name)
        return out
    loop = await PullLoop(nc, stream, name).start()
    try:
        deadline = time.monotonic() + idle_s
        while len(out) < want:
            batch = await loop.next_batch(want - len(out), timeout=1.0)
            if batch:
                out.extend(m[2] for m in batch)
                deadline = time.monotonic() + idle_s
            elif time.monotonic() > deadline:
                raise TimeoutError(f"read {len(out)} of {want} events of tenant {tenant}")
    finally:
        await loop.close()
        with contextlib.suppress(jsapi.JsApiError):
            await jsapi.delete_consumer(nc, stream, name)
    return out


def build_bundle(
    tenant: str,
    messages: list[bytes],
    *,
    since: str | None,
    exported_by: str,
    exported_hlc: Timestamp,
    chain_head: Head | None,
    signer: Signer,
) -> tuple[bytes, int]:
    """The signed bundle of ``messages`` (raw envelopes in stream order) and its event count.
    Events at or before ``since``, undecodable ones and snapshots are left out."""
    floor = sort_key(since) if since else None
    events: list[msgspec.Raw] = []
    for data in messages:
        try:
            e = decode(data)
        except EventError:
            continue
        if e.kind == SNAPSHOT_KIND or e.tenant != tenant:
            continue
        if floor is not None and sort_key(e.hlc) <= floor:
            continue
        events.append(msgspec.Raw(data))
    head = None
    if chain_head is not None:
        head = BundleHead(
            entries=chain_head.entries,
            head_chain_link=chain_head.head_chain_link,
            head_hlc=chain_head.head_hlc,
        )
    body = BundleBody(
        tenant=tenant,
        since=since,
        exported_by=exported_by,
        exported_hlc=str(exported_hlc),
        chain_head=head,
        events=events,
    )
    envelope = signer.sign(BUNDLE_PAYLOAD_TYPE, msgspec.json.encode(body))
    return msgspec.json.encode(envelope) + b"\n", len(events)


def open_bundle(
    data: bytes, keyring: Keyring, now_ms: int, max_skew_ms: int
) -> tuple[BundleBody, list[tuple[bytes, Envelope]], str, bool]:
    """Verify and decode a bundle without publishing anything: (body, events, key id that
    signed it, whether the exporter's chain head was checked). Raises :class:`BundleError`."""
    try:
        verified = verify(decode_envelope(data), keyring, expected_payload_type=BUNDLE_PAYLOAD_TYPE)
    except DsseError as exc:
        raise BundleError(f"bundle signature: {exc}") from None
    try:
        body = msgspec.json.decode(verified.body, type=BundleBody)
    except msgspec.DecodeError as exc:
        raise BundleError(f"signed bundle body is malformed: {exc}") from None
    if body.format != BUNDLE_FORMAT:
        raise BundleError(f"unknown bundle format {body.format!r}")
    events: list[tuple[bytes, Envelope]] = []
    ahead: list[str] = []
    for i, raw in enumerate(body.events):
        data_i = bytes(raw)
        try:
            e = decode(data_i)
        except EventError as exc:
            raise BundleError(f"event {i} of the bundle: {exc}") from None
        if e.tenant != body.tenant:
            raise BundleError(f"event {i} ({e.id}) is of tenant {e.tenant}, not {body.tenant}")
        if e.kind == SNAPSHOT_KIND:
            raise BundleError(f"event {i} ({e.id}) is an audit snapshot; bundles carry none")
        if e.timestamp.physical - now_ms > max_skew_ms:
            metrics.HLC_SKEW_REJECTIONS.inc()
            ahead.append(f"{e.id} ({e.hlc}, {e.timestamp.physical - now_ms} ms ahead)")
        events.append((data_i, e))
    if ahead:
        raise BundleError(
            f"{len(ahead)} event(s) are more than {max_skew_ms} ms ahead of this clock; the "
            f"bundle is refused as a whole: {', '.join(ahead[:5])}"
        )
    checked = False
    head = body.chain_head
    if body.since is None and head is not None and head.entries > 0:
        _check_exporter_head(events, head)
        checked = True
    return body, events, verified.key_id, checked


def _check_exporter_head(events: list[tuple[bytes, Envelope]], head: BundleHead) -> None:
    """A full bundle is the exporter's log in its order: its first ``head.entries`` chained
    events must rebuild the exporter's chain head exactly."""
    prev: str | None = None
    n = 0
    last_hlc = None
    for _, e in events:
        if n == head.entries:
            break
        if e.kind in CHAINED_KINDS:
            entry = make_entry(e, n, prev)
            prev, last_hlc = entry.chain_link, entry.t_hlc
            n += 1
    if n != head.entries or prev != head.head_chain_link or last_hlc != head.head_hlc:
        raise BundleError(
            f"the bundle's events do not rebuild the exporter's chain head "
            f"({head.entries} entries, {head.head_chain_link}): rebuilt {n} entries, {prev}"
        )


async def import_bundle(
    nc: FastClient,
    publisher: Publisher,
    stream: str,
    data: bytes,
    keyring: Keyring,
    *,
    now_ms: int,
    max_skew_ms: int,
) -> ImportReport:
    """Verify ``data`` and publish its events that the local log lacks, in HLC order."""
    body, events, key_id, checked = open_bundle(data, keyring, now_ms, max_skew_ms)
    present = {
        _id_decoder.decode(m).id
        for m in await read_tenant_messages(nc, stream, publisher.prefix, body.tenant)
    }
    todo = sorted(
        (e for e in events if e[1].id not in present), key=lambda x: (sort_key(x[1].hlc), x[1].id)
    )
    prefix = publisher.prefix
    acks = await publisher.publish_many(
        (subject_for(prefix, e.tenant, e.kind, e.payload), raw, e.id) for raw, e in todo
    )
    stored = [a.seq for a in acks if not a.duplicate]
    return ImportReport(
        tenant=body.tenant,
        exported_by=body.exported_by,
        key_id=key_id,
        events=len(events),
        published=len(stored),
        already_present=len(events) - len(todo),
        duplicates=len(acks) - len(stored),
        order_preserved=all(a < b for a, b in pairwise(stored)),
        chain_head_checked=checked,
    )
