"""Where a projector resumes in its stream, or why it must not (pure).

A state remembers the stream, the stream's creation (its epoch) and the last sequence it
applied; the stream's first and last sequences say whether the events after that are all
still there.
"""

from __future__ import annotations

from streamproc.state.keys import Checkpoint


class PositionError(RuntimeError):
    """The stream no longer holds what this state was built from; refuse to go on."""


def check_position(
    stream: str,
    cp: Checkpoint | None,
    epoch: str,
    first_seq: int,
    last_seq: int,
    *,
    allow_partial: bool = False,
) -> int:
    """The sequence to resume from, or :class:`PositionError` saying why not (pure).

    ``allow_partial`` lets a *fresh* state start at the stream's first sequence when the
    beginning has aged out (``replay --allow-partial``); a checkpoint never skips a gap."""
    if cp is None:
        if first_seq > 1:
            if allow_partial:
                return first_seq
            raise PositionError(
                f"stream {stream} no longer starts at sequence 1 (first is {first_seq}): "
                f"events 1..{first_seq - 1} are gone, so this state cannot be built from the "
                f"log; restore the stream, or build a state that lacks them on purpose with "
                f"`streamproc replay --role ROLE --allow-partial`"
            )
        return 1
    if cp.stream != stream:
        raise PositionError(f"state was built from stream {cp.stream}, not {stream}")
    if cp.epoch != epoch:
        raise PositionError(
            f"stream {stream} was recreated: checkpoint epoch {cp.epoch}, stream created "
            f"{epoch}; its sequences mean something else now. Rebuild with `streamproc replay`"
        )
    if last_seq < cp.last_seq:
        raise PositionError(
            f"stream {stream} ends at sequence {last_seq} but this state has applied up to "
            f"{cp.last_seq}: the stream was rewound or replaced. Rebuild with `streamproc replay`"
        )
    if first_seq > cp.last_seq + 1:
        raise PositionError(
            f"retention gap on stream {stream}: state applied up to {cp.last_seq}, the stream "
            f"now starts at {first_seq}; events {cp.last_seq + 1}..{first_seq - 1} are lost. "
            f"The projector will not skip them by itself"
        )
    return cp.last_seq + 1
