"""A real event log of the previous schema (``tests/data/events``: schedule events that said
``cron`` and ``includeKev``) still folds, by upcasting on read, into the state it made:

- every role whose stored state does not hold the renamed names folds it to the very digest
  recorded with the code that wrote it — the audit chain byte for byte among them;
- the read model folds it to the state the same events written today fold to;
- replaying it from a real stream gives the digest of the fold.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from streamproc.audit.entry import make_entry
from streamproc.bus import jsapi
from streamproc.bus.fastclient import FastClient
from streamproc.bus.publisher import Publisher
from streamproc.config import Configuration
from streamproc.events.catalog import KINDS
from streamproc.events.envelope import decode, encode
from streamproc.readmodel.queries import ReadModel
from streamproc.readmodel.records import RUN_STATES
from streamproc.roles import projections_for, rebuild
from streamproc.state.digest import state_digest
from streamproc.state.keys import Checkpoint
from streamproc.state.store import MemoryStore
from tests.helpers import memory_fold

DATA = Path(__file__).resolve().parents[1] / "data" / "events"
RECORDED: dict[str, str] = json.loads((DATA / "schema2-digests.json").read_text())
UNCHANGED = ("planner", "runner", "auditor", "scanner", "activity")
"""Roles whose state does not depend on the renamed names: the recorded digest holds. (The
planner's and the runner's are recorded again with their state formats of export revisions
— ``pl_exports`` 3 and ``pl_reports`` 2 with each image's last findings; ``runner`` 3 with
export times by ref and revision —: a format change, which a replay makes, not an upcast;
the planner's once more with ``pl_exports`` 4 (VEX claims' keys, EPSS), which changed only
its format record here. The auditor's, the chain's, is the one recorded first.)"""
CP = Checkpoint("SCHEDULER", "2026-12-06T02:18:00Z", 56)
"""The checkpoint the recorded digests were taken with."""


def recorded() -> list[tuple[int, str, bytes]]:
    lines = (DATA / "schema2-log.txt").read_bytes().splitlines()
    out = []
    for i, line in enumerate(lines, 1):
        subject, data = line.split(b" ", 1)
        out.append((i, subject.decode(), data))
    return out


def rewritten(msgs: list[tuple[int, str, bytes]]) -> list[tuple[int, str, bytes]]:
    """The same events as this version writes them (same ids, times and payloads)."""
    return [(seq, subject, encode(decode(data))) for seq, subject, data in msgs]


def test_the_recorded_log_is_of_the_previous_schema() -> None:
    msgs = recorded()
    assert len(msgs) == CP.last_seq
    schedules = [json.loads(d) for _, _, d in msgs if b'"kind":"schedule.created"' in d]
    assert {s["schema"] for s in schedules} == {2}
    assert all("cron" in s["payload"] and "includeKev" in s["payload"]["notify"] for s in schedules)
    assert KINDS["schedule.created"].version == 3 and KINDS["schedule.updated"].version == 3
    now = [json.loads(d) for _, _, d in rewritten(msgs) if b'"schedule.created"' in d]
    assert all("whenCron" in s["payload"] and "includeKEV" in s["payload"]["notify"] for s in now)


ADDED_SINCE = frozenset({"runner_sboms", "sbom_refs", "runner_vex"})
"""Projections added to a role after the log was recorded (the SBOM references, the VEX
claims): a state directory without them is rebuilt by replay (tests/sboms/test_replay.py),
and what they fold is tested on its own; the role's other projections must still give the
recorded digest."""


@pytest.mark.parametrize("role", UNCHANGED)
def test_roles_fold_the_recorded_log_to_the_recorded_digest(role: str) -> None:
    projections = [x for x in projections_for(role, Configuration()) if x.name not in ADDED_SINCE]
    assert state_digest(memory_fold(projections, recorded(), CP)) == RECORDED[role]


@pytest.mark.parametrize("role", [*UNCHANGED, "gateway"])
def test_old_and_new_form_of_the_same_events_fold_to_the_same_state(role: str) -> None:
    old = memory_fold(projections_for(role, Configuration()), recorded(), CP)
    new = memory_fold(projections_for(role, Configuration()), rewritten(recorded()), CP)
    assert state_digest(old) == state_digest(new)


def test_the_chain_hashes_schedule_payloads_in_their_recorded_form() -> None:
    """What keeps the chain: an entry's payload is the schema-2 form, for an event of either
    form (without it, the auditor's digest above would differ from the one recorded)."""
    for _, _, data in rewritten(recorded()):
        event = decode(data)
        if event.kind in ("schedule.created", "schedule.updated"):
            payload = make_entry(event, 0, None).payload
            assert '"whenCron"' not in payload and '"includeKEV"' not in payload, payload
            assert event.kind == "schedule.updated" or '"cron"' in payload


def test_the_read_model_shows_the_recorded_log_with_the_specifications_names() -> None:
    store: MemoryStore = memory_fold(projections_for("gateway", Configuration()), recorded(), CP)
    rm = ReadModel(store)
    nightly = rm.schedule("demo", "nightly-prod")
    assert nightly is not None and not nightly.paused
    assert (nightly.cron, nightly.timezone) == ("30 1 * * *", "Europe/Sofia")
    assert (nightly.notify.include_kev, nightly.notify.min_severity) == (True, "high")
    assert nightly.only_if.last_report_older_than_days == 3
    weekly = rm.schedule("demo", "weekly-kev")
    assert weekly is not None and weekly.deleted and weekly.subscriptions == []
    runs = rm.runs("demo", limit=50).items
    assert len(runs) == 4 and {r.state for r in runs} <= set(RUN_STATES)
    assert sorted(r.state for r in runs) == ["cancelled", "completed", "completed", "completed"]
    coalesced = next(r for r in runs if r.reason.export_count == 2)
    why = coalesced.reason
    assert (why.feedser_export_id, why.cursor) == ("2026-01-05.2", "2026-01-05.3")
    assert why.exports == ["feedser:2026-01-05.2", "feedser:2026-01-05.3"]
    cursor = rm.impact_cursor("demo")
    assert cursor.feedser_export_id == "2026-01-05.3" and cursor.vexer_export_id is None


@pytest.mark.parametrize("role", ["gateway", "planner", "runner", "auditor"])
async def test_a_replay_of_the_recorded_log_equals_its_fold(
    role: str,
    nc: FastClient,
    publisher: Publisher,
    prefix: str,
    stream_names: tuple[str, str, str],
    tmp_path: Path,
) -> None:
    stream = stream_names[0]
    msgs = [(prefix + s.removeprefix("scheduler"), d) for _, s, d in recorded()]
    acks = await publisher.publish_many((s, d, decode(d).id) for s, d in msgs)
    assert [a.seq for a in acks] == list(range(1, len(msgs) + 1))
    info = await jsapi.stream_info(nc, stream)
    assert info is not None
    summary = await rebuild(
        nc, stream, role, tmp_path / role, progress=False, configuration=Configuration()
    )
    cp = Checkpoint(stream, info.created, len(msgs))
    folded = [(i, s, d) for i, (s, d) in enumerate(msgs, 1)]
    assert summary.digest == state_digest(
        memory_fold(projections_for(role, Configuration()), folded, cp)
    )
