"""The runtime's own keys and records, defined once.

Projections own one or more column families (their names: :mod:`streamproc.names`);
``__meta__`` holds what the runtime itself keeps: the checkpoint, the state-format version,
the quarantine and the rejections (one record per event and projection, and their counts).
"""

from __future__ import annotations

import msgspec

from streamproc.names import IMPACT_GROUPS_CF
from streamproc.names import META_CF as META_CF

CHECKPOINT_KEY = b"checkpoint"
FORMAT_KEY = b"state_format"
QUARANTINE_PREFIX = b"quarantine/"
REJECTION_PREFIX = b"rejected/"
REJECTION_COUNTS_KEY = b"rejection_counts"
LOCK_FILE = "LOCK.streamproc"

POINT_READ_FAMILIES = frozenset({IMPACT_GROUPS_CF})
"""Column families read by multi-gets of thousands of random keys (a cold impact query):
RocksDB keeps their blocks uncompressed. Their values (msgpack id lists, roaring bytes)
barely compress (66 MB raw, 57 MB with Snappy), and decompressing a block per key was a
sixth to a third of the multi-get. (Every family's table files carry a bloom filter, which
spares a lookup the data blocks of the files that do not hold its key.)"""

STATE_FORMAT_VERSION = 1
"""Bump when a fold's stored layout changes; old directories must then be replayed."""


class Checkpoint(msgspec.Struct, frozen=True):
    """Stream epoch (its ``created`` time) and the last applied sequence, written atomically
    with the state they describe."""

    stream: str
    epoch: str
    last_seq: int


class Quarantined(msgspec.Struct, frozen=True):
    seq: int
    subject: str
    reason: str
    detail: str
    data: bytes


class Rejected(msgspec.Struct, frozen=True):
    """An event that decoded but could not apply (e.g. an update of an unknown entity)."""

    seq: int
    projection: str
    event_id: str
    kind: str
    reason: str
    detail: str


def seq_key(prefix: bytes, seq: int) -> bytes:
    return prefix + seq.to_bytes(8, "big")
