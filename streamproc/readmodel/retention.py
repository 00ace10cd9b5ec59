"""Read-model retention: finished runs leave the gateway's read model a configured age after
they finished, measured in *event time* so a replay prunes exactly what the live system did.

The read model keeps a clock — the newest HLC physical time among the events it has applied —
and an index of finished runs keyed by finish time. A run is gone once it finished more than
the retention before that clock. No wall clock is read: an idle log prunes nothing until its
next event, and the same events always leave the same state, whatever the batch boundaries.
"""

from __future__ import annotations

from streamproc.names import RM_RUNS_EXPIRY_CF
from streamproc.readmodel import keys

DEFAULT_DAYS = 180
"""``readmodel.retention_days``'s default (read by :mod:`streamproc.readmodel.settings`)."""
DAY_MS = 86_400_000
EXPIRY_CF = RM_RUNS_EXPIRY_CF

CLOCK_KEY = b"clock"
"""The read model's clock (big-endian milliseconds), beside the finish-time index."""
FINISHED_PREFIX = b"F"
"""``F`` + finish ms (8 bytes, big-endian) + tenant + NUL + run id -> requested seq (8 bytes)."""


def expiry_key(finished_ms: int, tenant: str, run_id: str) -> bytes:
    return FINISHED_PREFIX + finished_ms.to_bytes(8, "big") + keys.key(tenant, run_id)


def parse_expiry_key(key: bytes) -> tuple[int, str, str]:
    """``(finished_ms, tenant, run_id)`` of an index key (tenants never contain NUL)."""
    finished = int.from_bytes(key[1:9], "big")
    tenant, _, run_id = key[9:].partition(keys.SEP)
    return finished, tenant.decode(), run_id.decode()


def encode_ms(ms: int) -> bytes:
    return ms.to_bytes(8, "big")


def decode_ms(raw: bytes | None) -> int:
    return 0 if raw is None else int.from_bytes(raw, "big")
