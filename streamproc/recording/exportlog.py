"""Recording an export exactly once, on a bounded set of subjects.

An export is one event, kept for as long as the event log keeps anything. Giving each export
a subject of its own (and publishing it create-only) made it unique, but nats-server keeps an
index entry per distinct subject of a stream in memory, for as long as the subject has a
message: a webhook source that exports steadily grew the server's memory without bound
(docs/operations.md, "Memory"). So the exports of one tenant and source kind share
:data:`~streamproc.names.EXPORT_SHARDS` subjects, ``<prefix>.events.<tenant>.<kind>.s<NN>``,
the shard taken from a hash of the export's ref, and each shard is an aggregate with
optimistic concurrency of its own:

* an export is appended to its shard with ``Nats-Expected-Last-Subject-Sequence`` set to the
  shard's last sequence, once every export on the shard up to that sequence is known here —
  folded into the read model, appended by this process, or read from the shard — and the
  export's latest revision among them has another body (or there is none);
* the append fails if anyone appended to the shard since (another gateway replica): the
  server names the shard's new last sequence, the few events appended since are read from
  the shard (or, when there are many — a process just started — the read model is waited
  for), and the export is looked up among them before the next attempt.

So each revision of a ref is appended at most once, for good: no de-duplication window and no TTL is
involved, and no ``Nats-Msg-Id`` either — JetStream's duplicate window would otherwise hold
an entry per export for an hour. A publish resent after a lost acknowledgement meets its own
first copy as "wrong last sequence", and is recognised byte for byte among them. Appends to one
shard wait for each other in this process; different shards, tenants and kinds do not.
"""

from __future__ import annotations

import asyncio
import base64
import re
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import NamedTuple

from streamproc.bus import jsapi
from streamproc.bus.publisher import PubAck, Publisher, WrongExpectedSequence
from streamproc.events.envelope import EventError, decode
from streamproc.events.payloads import FeedserExport, VexerExport
from streamproc.readmodel.exports import export_digest

_LAST_SEQ = re.compile(r"wrong last sequence: (\d+)")
SCAN_MAX = 64
"""Most events of a shard read directly to learn what was appended since; beyond, the read
model is waited for instead (it is that far behind: a process just started)."""


class _TooMany:
    """More events to read than :data:`SCAN_MAX`."""


_TOO_MANY = _TooMany()


@dataclass(frozen=True)
class Recorded:
    """An export's revision as the log holds it: what tells a repeat from the next revision."""

    event_id: str
    seq: int
    digest: str
    revision: int


class NotCaughtUp(Exception):
    """The read model did not reach the shard's last sequence in time: whether the export
    is on the shard is unknown now (retrying is safe)."""


class Unreadable(Exception):
    """The log did not say what it holds at a sequence (retrying is safe)."""


Lookup = Callable[[], Recorded | None]
"""The read model's record of the export being appended (and of its legacy key)."""


class Append(NamedTuple):
    """An export event to append: its bytes as published, its id, its body's digest, its
    revision."""

    data: bytes
    event_id: str
    digest: str
    revision: int


Decide = Callable[[Recorded | None], Append | Recorded]
"""Given the export's latest record in the log (None: it is not there), what to append, or
the record a repeat is answered with."""


def _newest(a: Recorded | None, b: Recorded | None) -> Recorded | None:
    if a is None or (b is not None and b.seq > a.seq):
        return b
    return a


class ExportLog:
    """Appends exports to their shard subjects; one per gateway process."""

    def __init__(
        self,
        publisher: Publisher,
        stream: str,
        applied: Callable[[], int],
        wait_for: Callable[[int, float], Awaitable[None]],
        *,
        wait_s: float,
    ) -> None:
        self.publisher = publisher
        self.stream = stream
        self.applied = applied
        """The last stream sequence the read model has folded."""
        self.wait_for = wait_for
        self.wait_s = wait_s
        self._locks: dict[str, asyncio.Lock] = {}
        """One per shard subject: bounded by tenants x kinds x shards."""
        self._last: dict[str, int] = {}
        """Each shard's last sequence as last learned (an acknowledgement or a refusal)."""
        self._known: dict[str, int] = {}
        """Per shard: every export on it up to this sequence is known here — folded into the
        read model, or appended by this process and kept in ``_recent`` until it is."""
        self._recent: dict[tuple[str, str, str], Recorded] = {}
        self._order: deque[tuple[int, tuple[str, str, str]]] = deque()
        """``_recent`` by sequence, to forget what the read model has folded."""

    def recent(self, tenant: str, kind: str, ref: str) -> Recorded | None:
        """An export this process appended that the read model has not folded yet."""
        self._forget_folded()
        return self._recent.get((tenant, kind, ref))

    async def append(
        self, subject: str, key: tuple[str, str, str], lookup: Lookup, decide: Decide
    ) -> tuple[Recorded, bool]:
        """Record the export ``key`` (tenant, kind, ref) on its shard ``subject``: ``decide``
        is given its latest record in the log — the read model's (``lookup``), this
        process's, or one read from the shard — or None, and says what to append, or which
        record answers the delivery. The export as recorded, and whether it was appended now.
        Raises :class:`NotCaughtUp`, :class:`Unreadable` or the publisher's errors."""
        lock = self._locks.get(subject)
        if lock is None:
            lock = self._locks[subject] = asyncio.Lock()
        async with lock:
            sent: dict[bytes, Append] = {}
            """What this call published (a refusal may name our own first copy)."""
            found: Recorded | None = None
            """The newest record of the export read from the shard."""
            while True:
                # What the look-up below saw the read model hold: at least this far (it may
                # fold on while we wait for the server, but the look-up is not repeated).
                seen = self.applied()
                last = self._last.get(subject)
                if last is None:
                    last = self._last[subject] = await self._last_on(subject)
                covered = max(seen, self._known.get(subject, 0))
                if covered < last:
                    # Appended since what we know (by another replica, or our own copy whose
                    # acknowledgement was lost): read those few events of the shard.
                    scan = await self._between(subject, covered, last, key[2], sent)
                    if isinstance(scan, _TooMany):
                        await self._catch_up(last)  # far behind: the read model knows them
                        continue
                    ours, newest = scan
                    if ours is not None:
                        seq, mine = ours
                        rec = Recorded(mine.event_id, seq, mine.digest, mine.revision)
                        return self._appended(subject, key, rec)
                    found = _newest(found, newest)
                    self._known[subject] = last
                latest = _newest(_newest(lookup(), self.recent(*key)), found)
                decision = decide(latest)
                if isinstance(decision, Recorded):
                    return decision, False
                sent[decision.data] = decision
                try:
                    ack: PubAck = await self.publisher.publish(
                        subject, decision.data, None, expected_last_subject_seq=last
                    )
                except WrongExpectedSequence as exc:
                    m = _LAST_SEQ.search(exc.description)
                    if m is None:
                        raise
                    self._last[subject] = int(m.group(1))
                    continue  # someone (or our first copy) appended: read it, look again
                except BaseException:
                    self._last.pop(subject, None)  # stored or not: learn it again next time
                    raise
                rec = Recorded(decision.event_id, ack.seq, decision.digest, decision.revision)
                return self._appended(subject, key, rec)

    def _appended(
        self, subject: str, key: tuple[str, str, str], rec: Recorded
    ) -> tuple[Recorded, bool]:
        self._last[subject] = self._known[subject] = rec.seq
        self._recent[key] = rec
        self._order.append((rec.seq, key))
        return rec, True

    async def _between(
        self, subject: str, after: int, upto: int, ref: str, sent: dict[bytes, Append]
    ) -> tuple[tuple[int, Append] | None, Recorded | None] | _TooMany:
        """The shard's events in ``(after, upto]``: one this call sent (our own copy, byte
        for byte) and where, and the newest record of ``ref`` among them; ``_TOO_MANY`` when
        there are more than :data:`SCAN_MAX` to read."""
        seq = after + 1
        newest: Recorded | None = None
        for _ in range(SCAN_MAX):
            try:
                doc = await jsapi.request(
                    self.publisher.nc,
                    f"STREAM.MSG.GET.{self.stream}",
                    {"seq": seq, "next_by_subj": subject},
                )
                msg = doc["message"]
                at = int(msg["seq"])
                raw = base64.b64decode(msg["data"])
            except jsapi.JsApiError as exc:
                if exc.err_code == jsapi.NO_MESSAGE:
                    return None, newest
                raise Unreadable(str(exc)) from None
            except (KeyError, ValueError) as exc:
                raise Unreadable(f"the shard's event after {seq - 1}: {exc}") from None
            if at > upto:
                return None, newest
            mine = sent.get(raw)
            if mine is not None:
                return (at, mine), newest
            try:
                event = decode(raw)
            except EventError as exc:
                raise Unreadable(f"the event at {at}: {exc}") from None
            payload = event.payload
            if isinstance(payload, FeedserExport | VexerExport) and payload.ref == ref:
                newest = Recorded(event.id, at, export_digest(payload), payload.revision)
            seq = at + 1
        return _TOO_MANY

    def _forget_folded(self) -> None:
        applied = self.applied()
        while self._order and self._order[0][0] <= applied:
            _, key = self._order.popleft()
            self._recent.pop(key, None)

    async def _catch_up(self, seq: int) -> None:
        try:
            await self.wait_for(seq, self.wait_s)
        except TimeoutError:
            raise NotCaughtUp(
                f"the read model has not reached sequence {seq} of {self.stream}"
            ) from None

    async def _last_on(self, subject: str) -> int:
        """The shard's last sequence (0: nothing on it yet)."""
        try:
            doc = await jsapi.request(
                self.publisher.nc, f"STREAM.MSG.GET.{self.stream}", {"last_by_subj": subject}
            )
        except jsapi.JsApiError as exc:
            if exc.err_code == jsapi.NO_MESSAGE:
                return 0
            raise Unreadable(str(exc)) from None
        return int(doc["message"]["seq"])
