"""Cron tick arithmetic across DST with a fake clock, missed-tick policies, clock skew."""

from __future__ import annotations

from datetime import datetime

import pytest

from streamproc.planner.cron import due_ticks, iso_utc, next_tick, tick_id


def ms(text: str) -> int:
    return round(datetime.fromisoformat(text).timestamp() * 1000)


def simulate(cron: str, tz: str, start: str, hours: int, step_s: int = 60) -> list[str]:
    """A fake clock stepping through ``hours``; each due tick fires and becomes the anchor."""
    anchor = now = ms(start)
    nxt = next_tick(cron, tz, anchor)
    fired: list[str] = []
    for _ in range(hours * 3600 // step_s):
        now += step_s * 1000
        if nxt is None or now < nxt:  # as the reactor does: look only once a tick is due
            continue
        d = due_ticks(cron, tz, anchor, now)
        assert not d.late  # the clock never jumped: nothing is ever missed
        for t in d.fire:
            fired.append(iso_utc(t))
            anchor = t
        nxt = next_tick(cron, tz, anchor)
    return fired


@pytest.mark.parametrize(
    ("cron", "tz", "start", "expected"),
    [
        # Sofia springs forward 03:00 -> 04:00 on 2025-03-30: 03:30 fires once, at 04:00 EEST
        (
            "30 3 * * *",
            "Europe/Sofia",
            "2025-03-29T12:00:00+00:00",
            ["2025-03-30T01:00:00Z", "2025-03-31T00:30:00Z"],
        ),
        # ... and falls back 04:00 -> 03:00 on 2025-10-26: 03:30 happens twice, fires once
        (
            "30 3 * * *",
            "Europe/Sofia",
            "2025-10-25T12:00:00+00:00",
            ["2025-10-26T00:30:00Z", "2025-10-27T01:30:00Z"],
        ),
        # New York: 02:30 does not exist on 2025-03-09 -> once at 03:00 EDT
        (
            "30 2 * * *",
            "America/New_York",
            "2025-03-08T12:00:00+00:00",
            ["2025-03-09T07:00:00Z", "2025-03-10T06:30:00Z"],
        ),
        # 01:30 happens twice on 2025-11-02 -> once, at the first (EDT)
        (
            "30 1 * * *",
            "America/New_York",
            "2025-11-01T12:00:00+00:00",
            ["2025-11-02T05:30:00Z", "2025-11-03T06:30:00Z"],
        ),
        # Adelaide (+09:30/+10:30) springs forward 02:00 -> 03:00 on 2025-10-05
        (
            "30 2 * * *",
            "Australia/Adelaide",
            "2025-10-04T00:00:00+00:00",
            ["2025-10-04T16:30:00Z", "2025-10-05T16:00:00Z"],
        ),
        # ... and falls back 03:00 -> 02:00 on 2026-04-05: 02:30 twice, fires once
        (
            "30 2 * * *",
            "Australia/Adelaide",
            "2026-04-04T00:00:00+00:00",
            ["2026-04-04T16:00:00Z", "2026-04-05T17:00:00Z"],
        ),
        # Kolkata (+05:30, no DST): 02:30 local is 21:00 UTC the day before
        (
            "30 2 * * *",
            "Asia/Kolkata",
            "2025-03-29T12:00:00+00:00",
            ["2025-03-29T21:00:00Z", "2025-03-30T21:00:00Z"],
        ),
    ],
)
def test_fixed_time_fires_once_per_day_across_dst(
    cron: str, tz: str, start: str, expected: list[str]
) -> None:
    assert simulate(cron, tz, start, hours=48) == expected


def test_interval_schedules_follow_elapsed_time_through_the_repeated_hour() -> None:
    fired = simulate("*/30 * * * *", "America/New_York", "2025-11-02T04:50:00+00:00", hours=3)
    assert fired == [
        "2025-11-02T05:00:00Z",  # 01:00 EDT
        "2025-11-02T05:30:00Z",  # 01:30 EDT
        "2025-11-02T06:00:00Z",  # 01:00 EST
        "2025-11-02T06:30:00Z",  # 01:30 EST
        "2025-11-02T07:00:00Z",
        "2025-11-02T07:30:00Z",
    ]


def test_anchor_inside_the_repeated_hour_does_not_fire_the_first_occurrence_again() -> None:
    # fired at 01:30 EDT (05:30Z); a resume at 01:15 EST (06:15Z) must not re-fire 01:30 EDT
    assert (
        iso_utc(next_tick("30 1 * * *", "America/New_York", ms("2025-11-02T06:15:00+00:00")) or 0)
        == "2025-11-03T06:30:00Z"
    )


DOWN_FROM = ms("2025-06-01T12:00:00+00:00")
BACK_AT = ms("2025-06-04T12:00:00+00:00")  # three 02:00 UTC ticks were missed


def test_missed_ticks_default_fires_the_latest_once() -> None:
    d = due_ticks("0 2 * * *", "UTC", DOWN_FROM, BACK_AT)
    assert [iso_utc(t) for t in d.fire] == ["2025-06-04T02:00:00Z"] and d.late == d.fire


def test_missed_ticks_none_fires_nothing_and_moves_on() -> None:
    d = due_ticks("0 2 * * *", "UTC", DOWN_FROM, BACK_AT, "none")
    assert d.fire == [] and d.skipped_until == ms("2025-06-04T02:00:00+00:00")
    assert due_ticks("0 2 * * *", "UTC", d.skipped_until, BACK_AT, "none").fire == []


def test_missed_ticks_all_capped_fires_the_most_recent_ones_oldest_first() -> None:
    d = due_ticks("0 2 * * *", "UTC", DOWN_FROM, BACK_AT, "all-capped", cap=2)
    assert [iso_utc(t) for t in d.fire] == ["2025-06-03T02:00:00Z", "2025-06-04T02:00:00Z"]
    d = due_ticks("0 2 * * *", "UTC", DOWN_FROM, BACK_AT, "all-capped", cap=10)
    assert len(d.fire) == 3


def test_clock_skew_within_60s_is_on_time_and_one_tick_one_id() -> None:
    tick = ms("2025-06-02T02:00:00+00:00")
    planner_a = due_ticks("0 2 * * *", "UTC", DOWN_FROM, tick + 1_000, "none")
    planner_b = due_ticks("0 2 * * *", "UTC", DOWN_FROM, tick + 59_000, "none")
    assert planner_a.fire == planner_b.fire == [tick] and not planner_b.late
    assert tick_id("t1", "s1", planner_a.fire[0]) == tick_id("t1", "s1", planner_b.fire[0])
    assert tick_id("t1", "s1", tick) != tick_id("t2", "s1", tick)
    late = due_ticks("0 2 * * *", "UTC", DOWN_FROM, tick + 61_000, "none")
    assert late.fire == [] and late.skipped_until == tick
    assert due_ticks("0 2 * * *", "UTC", DOWN_FROM, tick - 1, "none").fire == []


def test_nothing_fires_at_or_before_the_anchor() -> None:
    tick = ms("2025-06-02T02:00:00+00:00")
    assert due_ticks("0 2 * * *", "UTC", tick, tick + 3_600_000).fire == []
