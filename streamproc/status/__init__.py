"""Role heartbeats and ``streamproc status``: every role, where it is, and whether it is well.

Each running role instance puts a small JSON record into the JetStream KV bucket
``<prefix>_status`` under ``<role>.<node>.<pid>`` every ``STREAMPROC_STATUS_INTERVAL_S``
(default 2 s): its applied sequence, the stream head it last saw, its lag, its failure (if
any) and its lease state. The bucket keeps values for :data:`KEEP_INTERVALS` intervals, so an
instance that died without saying goodbye first shows as a stale heartbeat and then vanishes;
one that stops cleanly deletes its key. ``streamproc status`` reads the bucket and renders a
table (or JSON) and exits 1 when something needs attention.
"""

from streamproc.status.heartbeat import StatusHeartbeat
from streamproc.status.record import (
    DEFAULT_INTERVAL_S,
    INTERVAL_ENV,
    KEEP_INTERVALS,
    STALE_INTERVALS,
    Heartbeat,
    bucket_name,
    interval_s,
    open_bucket,
)
from streamproc.status.report import (
    EXIT_UNHEALTHY,
    Instance,
    Report,
    as_json,
    assess,
    gather,
    health_of,
    read_heartbeats,
    render,
)

__all__ = [
    "DEFAULT_INTERVAL_S",
    "EXIT_UNHEALTHY",
    "INTERVAL_ENV",
    "KEEP_INTERVALS",
    "STALE_INTERVALS",
    "Heartbeat",
    "Instance",
    "Report",
    "StatusHeartbeat",
    "as_json",
    "assess",
    "bucket_name",
    "gather",
    "health_of",
    "interval_s",
    "open_bucket",
    "read_heartbeats",
    "render",
]
