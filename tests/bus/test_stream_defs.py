"""Stream definitions and the diff that decides update vs. drift (pure; no server)."""

from __future__ import annotations

import copy

import pytest

from streamproc.bus.streams import HOUR, NS, definitions, diff, stream_names


def events_def() -> dict:
    return copy.deepcopy(definitions("scheduler", 1)[0])


# ---------------------------------------------------------------- diff


def test_identical_config_has_no_differences():
    d = events_def()
    assert diff(d, copy.deepcopy(d)) == ({}, {})


def test_extra_running_keys_are_ignored():
    want = events_def()
    have = dict(want, sealed=False, first_seq=1, compression="none")
    assert diff(have, want) == ({}, {})


@pytest.mark.parametrize(
    ("key", "old", "new"),
    [
        ("retention", "limits", "workqueue"),
        ("retention", "workqueue", "limits"),
        ("storage", "file", "memory"),
        ("name", "OLD", "SCHEDULER"),
    ],
)
def test_immutable_changes_are_drift(key, old, new):
    want = events_def()
    want[key] = new
    have = dict(want, **{key: old})
    changed, drift = diff(have, want)
    assert drift == {key: (old, new)}
    assert changed == {}


@pytest.mark.parametrize(("old", "new"), [("limits", "interest"), ("interest", "limits")])
def test_retention_between_limits_and_interest_is_an_update(old, new):
    want = dict(events_def(), retention=new)
    have = dict(want, retention=old)
    assert diff(have, want) == ({"retention": (old, new)}, {})


@pytest.mark.parametrize("flag", ["deny_delete", "deny_purge"])
def test_turning_a_deny_flag_off_is_drift(flag):
    want = dict(events_def(), **{flag: False})
    have = dict(want, **{flag: True})
    changed, drift = diff(have, want)
    assert drift == {flag: (True, False)}
    assert changed == {}


@pytest.mark.parametrize("flag", ["deny_delete", "deny_purge"])
def test_turning_a_deny_flag_on_is_an_update(flag):
    want = dict(events_def(), **{flag: True})
    have = dict(want, **{flag: False})
    changed, drift = diff(have, want)
    assert changed == {flag: (False, True)}
    assert drift == {}


@pytest.mark.parametrize(
    ("key", "old"),
    [
        ("max_age", 30 * 24 * HOUR),
        ("duplicate_window", 2 * 60 * NS),
        ("num_replicas", 3),
        ("max_msg_size", 1024),
        ("subjects", ["scheduler.events.acme.>"]),
        ("discard", "old"),
        ("description", "old text"),
    ],
)
def test_mutable_changes_are_updates(key, old):
    want = events_def()
    have = dict(want, **{key: old})
    changed, drift = diff(have, want)
    assert changed == {key: (old, want[key])}
    assert drift == {}


def test_missing_running_key_is_an_update():
    want = events_def()
    have = dict(want)
    del have["allow_direct"]
    assert diff(have, want) == ({"allow_direct": (None, True)}, {})


def test_empty_descriptions_are_equal():
    want = dict(events_def(), description="")
    have = dict(want)
    del have["description"]
    assert diff(have, want) == ({}, {})


def test_mixed_updates_and_drift_are_split():
    want = events_def()
    have = dict(want, retention="workqueue", max_age=HOUR, deny_delete=False, deny_purge=True)
    changed, drift = diff(have, want)
    assert changed == {"max_age": (HOUR, 0), "deny_delete": (False, True)}
    assert drift == {"retention": ("workqueue", "limits"), "deny_purge": (True, False)}


# ---------------------------------------------------------------- definitions


def test_three_streams_with_documented_settings():
    events, work, notify, _sboms = definitions("scheduler", 1)
    assert [events["name"], work["name"], notify["name"]] == [
        "SCHEDULER",
        "SCHEDULER_WORK",
        "SCHEDULER_NOTIFY",
    ]
    assert events["subjects"] == ["scheduler.events.>"]
    assert work["subjects"] == ["scheduler.work.>"]
    assert notify["subjects"] == ["scheduler.notify.>"]
    assert (events["retention"], work["retention"], notify["retention"]) == (
        "limits",
        "workqueue",
        "interest",  # held by its consumers: the delivery window, registrations
    )
    for d in (events, work, notify):
        assert d["duplicate_window"] == 3600 * 10**9  # one hour, in nanoseconds
        assert d["storage"] == "file"
        assert d["num_replicas"] == 1
    # the event log is kept forever and can't lose single messages
    assert events["max_age"] == 0
    assert events["deny_delete"] is True
    assert events["discard"] == "new"
    assert work["max_age"] == 7 * 24 * 3600 * 10**9
    assert notify["max_age"] == 7 * 24 * 3600 * 10**9  # the hold's limit
    assert notify["discard"] == "old"


def test_replicas_are_applied_to_every_stream():
    assert {d["num_replicas"] for d in definitions("scheduler", 3)} == {3}


@pytest.mark.parametrize(
    ("prefix", "base"),
    [("acme", "ACME"), ("acme.dev", "ACME_DEV"), ("stella-ops", "STELLA_OPS")],
)
def test_prefix_changes_names_and_subjects(prefix, base):
    defs = definitions(prefix, 1)
    bucket = f"{prefix.replace('.', '_')}_sboms"
    assert [d["name"] for d in defs] == [
        base,
        f"{base}_WORK",
        f"{base}_NOTIFY",
        f"OBJ_{bucket}",
    ]
    assert list(stream_names(prefix)) == [d["name"] for d in defs[:3]]
    assert [d["subjects"] for d in defs] == [
        [f"{prefix}.events.>"],
        [f"{prefix}.work.>"],
        [f"{prefix}.notify.>"],
        [f"$O.{bucket}.C.>", f"$O.{bucket}.M.>"],
    ]
    assert all("scheduler" not in s for d in defs for s in d["subjects"])


def test_definitions_are_fresh_objects():
    a = definitions("scheduler", 1)
    a[0]["subjects"].append("mutated")
    assert definitions("scheduler", 1)[0]["subjects"] == ["scheduler.events.>"]
