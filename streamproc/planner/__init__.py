"""The planner: from an export, a cron tick or a request to a planned run of segments.

Planning is a pure function of folded state and the triggering event (:mod:`.plan`); the
projections fold what it needs (:mod:`.projection`); reactors act on it (:mod:`.reactor`,
:mod:`.cron`). See ``docs/planning.md``.
"""
