"""The schedule as its events define it: one record type for every projection that folds
schedules.

The read model (:class:`streamproc.readmodel.records.ScheduleRecord`) and the planner
(:class:`streamproc.planner.records.ScheduleView`) both fold ``schedule.*`` events into a
stored record; these fields mean the same in both and are written by the same events, so they
are declared once here. Each projection extends it only with what it alone maintains. The
API's ``ScheduleView`` (:mod:`streamproc.gateway.api.models`) stays a type of its own: see there.
"""

from __future__ import annotations

import msgspec

from streamproc.events import payloads as p


class ScheduleBase(msgspec.Struct, kw_only=True):
    """What ``schedule.created`` sets and ``schedule.updated|paused|resumed|deleted`` change.

    Stored as msgpack maps (field names as keys), so a record decodes whatever the order its
    fields were written in.
    """

    id: str
    tenant: str
    cron: str
    timezone: str
    mode: p.Mode = "analysis-only"
    selection: p.Selection = msgspec.field(default_factory=p.Selection)
    only_if: p.OnlyIf = msgspec.field(default_factory=p.OnlyIf)
    limits: p.Limits = msgspec.field(default_factory=p.Limits)
    subscriptions: list[str] = []
    paused: bool = False
    deleted: bool = False
