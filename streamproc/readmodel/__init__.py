"""The gateway's read model: schedules, runs (with stats and deltas), the deltas'
acknowledgements, export records, indexed images and VEX documents.

Pure folds over the event log into tenant-prefixed RocksDB keys; the gateway answers every
GET from here and checks every write against it before publishing.
"""

from __future__ import annotations

from collections.abc import Callable

from streamproc.readmodel.acks import DeltaAcks
from streamproc.readmodel.exports import Exports
from streamproc.readmodel.images import Images
from streamproc.readmodel.runs import Runs
from streamproc.readmodel.schedules import Schedules
from streamproc.readmodel.vex import VexDocuments
from streamproc.runtime.projection import Projection

READ_MODEL: list[Callable[[], Projection]] = [
    Schedules,
    Runs,
    Exports,
    Images,
    VexDocuments,
    DeltaAcks,
]
"""Projection factories, in the form ``RoleSpec.projections`` takes."""

__all__ = ["READ_MODEL", "DeltaAcks", "Exports", "Images", "Runs", "Schedules", "VexDocuments"]
