"""What a poll records, decided from the directory and the ledger alone: the ledger folded
from export events (only the role's own source), and the plan — per tenant what changed,
tenants with the same change sharing one export, the same change always the same body."""

from __future__ import annotations

import shutil
from pathlib import Path

import msgspec
import pytest

from streamproc.events import payloads as p
from streamproc.events.envelope import encode, new_event
from streamproc.feeds import plan as plan_mod
from streamproc.feeds.ledger import SOURCE, Ledger
from streamproc.feeds.plan import plan
from streamproc.feeds.queries import LedgerQueries
from streamproc.ids import derive_id
from streamproc.runtime.projection import Folder
from streamproc.scanner.advisories import AdvisoryDb
from streamproc.state import keys
from streamproc.state.digest import state_digest
from streamproc.state.store import MemoryStore

DATA = Path(__file__).resolve().parents[1] / "data"
ADVISORIES = ("GHSA-r9hx-vwmv-q579", "DSA-5514-1", "GHSA-cx63-2mw6-8hw5")


def osv_dir(tmp: Path, *names: str) -> Path:
    d = tmp / "osv"
    d.mkdir(exist_ok=True)
    for name in names:
        shutil.copy(DATA / f"osv/{name}.json", d / f"{name}.json")
    return d


def load(d: Path) -> AdvisoryDb:
    return AdvisoryDb.load(d, DATA / "kev.json", DATA / "osv/debian-sources.json")


class Ledgers:
    """The role's ledger folded from hand-built export events, batch by batch."""

    def __init__(self) -> None:
        self.store = MemoryStore()
        self.folder = Folder(self.store, [Ledger()], "test")
        self.seq = 0
        self.q = LedgerQueries(self.store)

    def record(self, body: p.FeedserExportBody, tenant: str, source: str = SOURCE) -> int:
        self.seq += 1
        payload = p.sourced_export(body, source)
        hlc = f"{1_700_000_000_000 + self.seq}:0:n"
        event_id = derive_id(source, body.export_id, tenant)
        event = new_event("export.feedser", tenant, payload, hlc, event_id=event_id)
        msg = (self.seq, "x.export.feedser", encode(event))
        self.folder.apply([msg], keys.Checkpoint("S", "epoch", self.seq))
        return self.seq


def test_the_first_poll_exports_every_advisory_once_for_all_tenants(tmp_path: Path) -> None:
    db = load(osv_dir(tmp_path, *ADVISORIES[:2]))
    todo = plan(db, {"acme": {}, "globex": {}})
    assert todo.invalid == {}
    assert len(todo.exports) == 1
    (first,) = todo.exports
    assert first.tenants == ["acme", "globex"], "the same change: one export for both"
    assert [a.vuln_id for a in first.body.advisories] == sorted(ADVISORIES[:2])
    assert first.body.kev == ["CVE-2023-4911"]
    assert first.body.window is None, "nothing in the body but the advisories' content"
    again = plan(load(osv_dir(tmp_path)), {"acme": {}, "globex": {}})
    assert again.exports[0].body == first.body, "the same change makes the same body"


def test_the_ledger_remembers_what_was_recorded_per_tenant(tmp_path: Path) -> None:
    d = osv_dir(tmp_path, *ADVISORIES[:2])
    ledger = Ledgers()
    (first,) = plan(load(d), {"acme": {}}).exports
    ledger.record(first.body, "acme")
    sent = {t: ledger.q.sent(t) for t in ("acme", "globex")}
    assert sorted(sent["acme"]) == sorted(ADVISORIES[:2]) and sent["globex"] == {}
    rec = ledger.q.export("acme", "feedser", f"{SOURCE}:{first.body.export_id}")
    assert rec is not None and rec.revision == 1
    todo = plan(load(d), sent)
    assert [e.tenants for e in todo.exports] == [["globex"]], "acme has it, globex has not"
    assert todo.exports[0].body == first.body, "so a crash between tenants records the same"

    osv_dir(tmp_path, ADVISORIES[2])  # a new advisory
    todo = plan(load(d), {t: ledger.q.sent(t) for t in ("acme",)})
    (later,) = todo.exports
    assert [a.vuln_id for a in later.body.advisories] == [ADVISORIES[2]]
    assert later.body.export_id != first.body.export_id
    ledger.record(later.body, "acme")
    assert plan(load(d), {"acme": ledger.q.sent("acme")}).exports == [], "nothing changed"


def test_a_changed_advisory_is_exported_again_and_another_source_is_ignored(
    tmp_path: Path,
) -> None:
    d = osv_dir(tmp_path, ADVISORIES[0])
    ledger = Ledgers()
    (first,) = plan(load(d), {"acme": {}}).exports
    ledger.record(first.body, "acme", source="feedser-main")  # a webhook's: not the role's
    assert ledger.q.sent("acme") == {}
    ledger.record(first.body, "acme")
    path = d / f"{ADVISORIES[0]}.json"
    doc = msgspec.json.decode(path.read_bytes())
    doc["database_specific"] = {**(doc.get("database_specific") or {}), "severity": "LOW"}
    doc.pop("severity", None)
    path.write_bytes(msgspec.json.encode(doc))
    (changed,) = plan(load(d), {"acme": ledger.q.sent("acme")}).exports
    assert [(a.vuln_id, a.severity) for a in changed.body.advisories] == [(ADVISORIES[0], "low")]


def test_a_large_change_is_cut_into_several_exports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    d = osv_dir(tmp_path, *ADVISORIES)
    monkeypatch.setattr(plan_mod, "MAX_ADVISORIES", 2)
    todo = plan(load(d), {"acme": {}})
    assert [len(e.body.advisories) for e in todo.exports] == [2, 1]
    assert len({e.body.export_id for e in todo.exports}) == 2


def test_a_replay_of_the_ledger_reaches_the_same_state(tmp_path: Path) -> None:
    d = osv_dir(tmp_path, *ADVISORIES)
    bodies = [e.body for e in plan(load(d), {"acme": {}, "globex": {}}).exports]
    logs = [Ledgers(), Ledgers()]
    for ledger in logs:
        for body in bodies:
            for tenant in ("acme", "globex"):
                ledger.record(body, tenant)
    assert state_digest(logs[0].store) == state_digest(logs[1].store)


def test_a_new_kev_mark_on_an_unchanged_file_is_the_exports_next_revision(
    tmp_path: Path,
) -> None:
    """The exportId follows the files; the body follows the entries: a KEV mark that arrives
    with a new KEV file makes the same exportId with another body (a revision)."""
    d = osv_dir(tmp_path, "DSA-5514-1")
    ledger = Ledgers()
    before = AdvisoryDb.load(d, None, DATA / "osv/debian-sources.json")
    (first,) = plan(before, {"acme": {}}).exports
    assert first.body.kev == []
    ledger.record(first.body, "acme")
    (marked,) = plan(load(d), {"acme": ledger.q.sent("acme")}).exports
    assert marked.body.export_id == first.body.export_id
    assert marked.body.kev == ["CVE-2023-4911"] and marked.body != first.body
