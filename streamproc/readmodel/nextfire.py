"""Next fire times of a cron schedule, in its own time zone, computed when read.

They depend on the clock, so they never enter a fold; cronsim walks local wall time, which
handles DST gaps (a skipped 02:30 fires at the next valid time) and folds.
"""

from __future__ import annotations

from datetime import UTC, datetime
from itertools import islice
from zoneinfo import ZoneInfo

from cronsim import CronSim


def next_fire_times(cron: str, timezone: str, now: datetime, n: int) -> list[datetime]:
    """The next ``n`` fire times strictly after ``now``, as aware datetimes in ``timezone``."""
    if n <= 0:
        return []
    local = now.astimezone(ZoneInfo(timezone)).replace(microsecond=0)
    return list(islice(CronSim(cron, local), n))


def iso(dt: datetime) -> str:
    return dt.isoformat()


def ms_to_iso(ms: int | None) -> str | None:
    if ms is None:
        return None
    return (
        datetime.fromtimestamp(ms / 1000, UTC)
        .isoformat(timespec="milliseconds")
        .replace("+00:00", "Z")
    )
