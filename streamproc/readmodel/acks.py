"""Acknowledgements of deltas: who took charge of an image whose verdict got worse in a run,
with a note and a ticket, folded from ``delta.acknowledged``.

One record per (tenant, run, digest), replaced by a later acknowledgement of the same delta.
The delta must exist in the run's deltas (the ``Runs`` projection's ``rm_run_deltas``, read
as of the event): an acknowledgement of anything else is rejected with ``unknown_delta``.
When the read model's retention drops a run, its acknowledgements go with it, in the same
batch (``Runs.removes``: the keys are laid out as the run's delta keys are).
"""

from __future__ import annotations

from typing import ClassVar

import msgspec

from streamproc.events.envelope import Envelope
from streamproc.events.payloads import DeltaAcknowledged
from streamproc.names import RM_DELTA_ACKS
from streamproc.readmodel import keys
from streamproc.readmodel.runs import DELTAS_CF, delta_prefix
from streamproc.readmodel.schedules import physical_ms
from streamproc.runtime.fold import folds
from streamproc.runtime.projection import Projection, Rejection
from streamproc.state.tx import Tx

CF = RM_DELTA_ACKS


class AckRecord(msgspec.Struct, kw_only=True):
    """One delta's acknowledgement as the read model keeps it."""

    run_id: str
    digest: str
    by: str | None
    note: str | None
    ticket: str | None
    acknowledged_ms: int
    """The physical time of the event's HLC stamp."""
    event_id: str
    seq: int


_enc = msgspec.msgpack.Encoder()
decode_ack = msgspec.msgpack.Decoder(AckRecord).decode


def ack_key(tenant: str, run_id: str, digest: str) -> bytes:
    """Laid out as the run's delta keys are (tenant, run, digest)."""
    return keys.key(tenant, run_id, digest)


class DeltaAcks(Projection):
    name: ClassVar[str] = CF
    reads: ClassVar[tuple[str, ...]] = (DELTAS_CF,)

    @folds(DeltaAcknowledged)
    def _acknowledged(self, tx: Tx, e: Envelope, a: DeltaAcknowledged) -> None:
        if tx.table(DELTAS_CF).get(delta_prefix(e.tenant, a.run_id) + a.digest.encode()) is None:
            raise Rejection("unknown_delta", f"image {a.digest} is not a delta of run {a.run_id}")
        rec = AckRecord(
            run_id=a.run_id,
            digest=a.digest,
            by=a.by,
            note=a.note,
            ticket=a.ticket,
            acknowledged_ms=physical_ms(e),
            event_id=e.id,
            seq=tx.seq,
        )
        tx.table(CF).put(ack_key(e.tenant, a.run_id, a.digest), _enc.encode(rec))
