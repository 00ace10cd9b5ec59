"""Crash points: a test hook that kills this process (SIGKILL) at a named place.

``STREAMPROC_CRASH_AT=<name>`` or ``<name>:<n>`` kills the process the ``n``-th time (default
the first) it reaches ``crash_point(name)`` — a real crash, nothing flushed or closed, for
tests that must prove recovery from exactly that moment. It is not a setting: unset (always,
outside such tests) a crash point costs one dictionary lookup. Places:

- ``planner.after_log_events``: a plan's ``run.planned`` and segment events are stored, its
  work items not yet published (:mod:`streamproc.planner.reactor`).
"""

from __future__ import annotations

import os
import signal
import sys

CRASH_AT_ENV = "STREAMPROC_CRASH_AT"
_hits: dict[str, int] = {}


def crash_point(name: str) -> None:
    spec = os.environ.get(CRASH_AT_ENV)
    if not spec:
        return
    want, _, nth = spec.partition(":")
    if want != name:
        return
    _hits[name] = _hits.get(name, 0) + 1
    if _hits[name] == int(nth or 1):
        print(f"streamproc: crash point {name} reached ({CRASH_AT_ENV})", file=sys.stderr)
        sys.stderr.flush()
        os.kill(os.getpid(), signal.SIGKILL)
