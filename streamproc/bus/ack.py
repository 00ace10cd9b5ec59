"""The ``$JS.ACK`` reply subject of a delivered JetStream message, parsed in one place.

The server names the delivery in the reply subject (NATS ADR-15), in one of two layouts:

- v1, 9 tokens: ``$JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.<consumer seq>.
  <timestamp ns>.<pending>``
- v2, 11 or more: ``$JS.ACK.<domain>.<account hash>.<stream>.<consumer>.<delivered>.
  <stream seq>.<consumer seq>.<timestamp ns>.<pending>[.<random token>…]``; the domain is
  ``_`` when there is none, and tokens a later server appends are ignored (as nats-py does).

Pull loops read only the stream sequence, once per message, so :func:`stream_seq` works on the
raw bytes without building an object; :func:`parse` gives every field.
"""

from __future__ import annotations

import msgspec

PREFIX = b"$JS.ACK."
"""What every ack reply subject starts with."""

V1_TOKENS = 9
V2_MIN_TOKENS = 11
_NO_DOMAIN = "_"


class NotAckSubject(ValueError):
    """A reply subject that is not a JetStream delivery's ``$JS.ACK`` subject."""


class AckInfo(msgspec.Struct, frozen=True):
    """Everything a ``$JS.ACK`` subject says about one delivery."""

    stream: str
    consumer: str
    delivered: int
    stream_seq: int
    consumer_seq: int
    timestamp_ns: int
    pending: int
    domain: str = ""
    account_hash: str = ""


def is_ack(reply: bytes | str) -> bool:
    """Whether ``reply`` is an ack subject (a delivered message, not a status message)."""
    if isinstance(reply, str):
        return reply.startswith("$JS.ACK.")
    return reply[:8] == PREFIX


def _offset(n_tokens: int, reply: bytes | str) -> int:
    """Where ``<stream>`` sits: v2 puts domain and account hash before it."""
    if n_tokens == V1_TOKENS:
        return 2
    if n_tokens >= V2_MIN_TOKENS:
        return 4
    raise NotAckSubject(f"not a $JS.ACK subject ({n_tokens} tokens): {reply!r}")


def stream_seq(reply: bytes) -> int:
    """The stream sequence of the delivery ``reply`` acknowledges.

    Called once per consumed message: at most ten pieces are split off, and the layout is told
    by their count (9: v1; 10 with more tokens in the last: v2).
    """
    tokens = reply.split(b".", 9)
    n = len(tokens)
    if n == V1_TOKENS:
        at = 5
    elif n == 10 and b"." in tokens[9]:
        at = 7
    else:
        raise NotAckSubject(f"not a $JS.ACK subject ({n} tokens): {reply!r}")
    if tokens[0] != b"$JS" or tokens[1] != b"ACK":
        raise NotAckSubject(f"not a $JS.ACK subject: {reply!r}")
    try:
        return int(tokens[at])
    except ValueError:
        raise NotAckSubject(f"no stream sequence in {reply!r}") from None


def delivery(reply: bytes) -> tuple[int, int]:
    """``(consumer sequence, pending)`` of the delivery ``reply`` acknowledges: the
    consumer numbers its deliveries one by one (a redelivery keeps its number), and
    ``pending`` counts the messages of its filter it had not delivered yet."""
    tokens = reply.split(b".", 11)
    n = len(tokens)
    if n == V1_TOKENS:
        at = 6
    elif n >= V2_MIN_TOKENS:
        at = 8
    else:
        raise NotAckSubject(f"not a $JS.ACK subject ({n} tokens): {reply!r}")
    try:
        return int(tokens[at]), int(tokens[at + 2])
    except ValueError:
        raise NotAckSubject(f"a $JS.ACK subject with a non-numeric count: {reply!r}") from None


def parse(reply: bytes | str) -> AckInfo:
    """Every field of a ``$JS.ACK`` subject, in either layout."""
    text = reply.decode() if isinstance(reply, bytes) else reply
    if not is_ack(text):
        raise NotAckSubject(f"not a $JS.ACK subject: {text!r}")
    tokens = text.split(".")
    at = _offset(len(tokens), text)
    domain, account_hash = ("", "") if at == 2 else (tokens[2], tokens[3])
    try:
        return AckInfo(
            stream=tokens[at],
            consumer=tokens[at + 1],
            delivered=int(tokens[at + 2]),
            stream_seq=int(tokens[at + 3]),
            consumer_seq=int(tokens[at + 4]),
            timestamp_ns=int(tokens[at + 5]),
            pending=int(tokens[at + 6]),
            domain="" if domain == _NO_DOMAIN else domain,
            account_hash=account_hash,
        )
    except ValueError:
        raise NotAckSubject(f"a $JS.ACK subject with a non-numeric count: {text!r}") from None
