"""What one poll records, decided from the advisory database and the ledger alone (no I/O):
per tenant, the advisories whose export entry differs from the one last recorded for it;
tenants with the same changes share one export; a large change is cut into several exports.

Every body is built by the ``feedser export`` command's builder
(:func:`streamproc.scanner.feedser.export_of`) and carries no window: all of it, its exportId
included, follows from the advisories' content, so a poll repeated after a crash makes the
very same bodies, which the recording path answers as duplicates."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import msgspec

from streamproc.events.payloads import MAX_KEYS, AdvisoryChange, FeedserExportBody
from streamproc.feeds.ledger import entry_digest
from streamproc.scanner.advisories import Advisory, AdvisoryDb
from streamproc.scanner.feedser import entry_of, export_of

MAX_ADVISORIES = 500
"""Most advisories in one export: a first poll of a large directory becomes several exports,
each a modest event."""


@dataclass(frozen=True)
class Planned:
    """One export to record for ``tenants``."""

    body: FeedserExportBody
    tenants: list[str]


@dataclass(frozen=True)
class Plan:
    exports: list[Planned]
    invalid: dict[str, str]
    """vulnId → why its export entry is not valid (left out, told in the log)."""


def _chunks(changed: list[Advisory], db: AdvisoryDb) -> list[list[Advisory]]:
    """``changed`` cut so that no export exceeds :data:`MAX_ADVISORIES` advisories or the
    webhook's :data:`MAX_KEYS` keys (an advisory's keys count twice: its own list and the
    export's changed product keys)."""
    out: list[list[Advisory]] = []
    chunk: list[Advisory] = []
    weight = 0
    for a in changed:
        w = 2 * len(db.product_keys(a)) + len(a.cves)
        if chunk and (len(chunk) >= MAX_ADVISORIES or weight + w > MAX_KEYS):
            out.append(chunk)
            chunk, weight = [], 0
        chunk.append(a)
        weight += w
    if chunk:
        out.append(chunk)
    return out


def plan(db: AdvisoryDb, sent: Mapping[str, Mapping[str, str]]) -> Plan:
    """The exports that bring each tenant of ``sent`` (tenant → vulnId → digest as last
    exported) up to ``db``. Advisories left out of the directory are not exported: an export
    says what changed, never what went away."""
    digests: dict[str, str] = {}
    invalid: dict[str, str] = {}
    ordered = sorted(db.advisories.values(), key=lambda a: a.id)
    for a in ordered:
        try:
            change = msgspec.convert(entry_of(db, a), AdvisoryChange)
        except msgspec.ValidationError as exc:
            invalid[a.id] = str(exc)
            continue
        digests[a.id] = entry_digest(change)
    groups: dict[tuple[str, ...], list[str]] = {}
    for tenant, known in sent.items():
        changed = tuple(i for i, d in digests.items() if known.get(i) != d)
        if changed:
            groups.setdefault(changed, []).append(tenant)
    exports = []
    for ids, tenants in groups.items():
        for chunk in _chunks([db.advisories[i] for i in ids], db):
            body = msgspec.convert(export_of(db, chunk), FeedserExportBody)
            exports.append(Planned(body, tenants))
    return Plan(exports, invalid)
