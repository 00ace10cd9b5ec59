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
  folded into the read model, appended by this process, or read from the shard — and the ref
  is not among them;
* the append fails if anyone appended to the shard since (another gateway replica): the
  server names the shard's new last sequence, the few events appended since are read from
  the shard (or, when there are many — a process just started — the read model is waited
  for), and the export is looked up among them before the next attempt.

So a ref is appended at most once, for good: no de-duplication window and no TTL is
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
    """An export as the log holds it: what tells a repeat from a conflict."""

    event_id: str
    seq: int
    digest: str


class NotCaughtUp(Exception):
    """The read model did not reach the shard's last sequence in time: whether the export
    is on the shard is unknown now (retrying is safe)."""


class Unreadable(Exception):
    """The log did not say what it holds at a sequence (retrying is safe)."""


Lookup = Callable[[], Recorded | None]
"""The read model's record of the export being appended (and of its legacy key)."""


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
        self, subject: str, data: bytes, event_id: str, key: tuple[str, str, str],
        digest: str, lookup: Lookup,
    ) -> tuple[Recorded, bool]:  # fmt: skip
        """Append the export event ``data`` (id ``event_id``) to its shard ``subject`` unless
        the log holds its ref already; the export as recorded, and whether it was appended
        now. Raises :class:`NotCaughtUp`, :class:`Unreadable` or the publisher's errors."""
        lock = self._locks.get(subject)
        if lock is None:
            lock = self._locks[subject] = asyncio.Lock()
        async with lock:
            while True:
                # What the look-up below saw the read model hold: at least this far (it may
                # fold on while we wait for the server, but the look-up is not repeated).
                seen = self.applied()
                known = lookup() or self.recent(*key)
                if known is not None:
                    return known, False
                last = self._last.get(subject)
                if last is None:
                    last = self._last[subject] = await self._last_on(subject)
                covered = max(seen, self._known.get(subject, 0))
                if covered < last:
                    # Appended since what we know (by another replica, or our own copy whose
                    # acknowledgement was lost): read those few events of the shard.
                    found = await self._between(subject, covered, last, key[2], data)
                    if isinstance(found, _TooMany):
                        await self._catch_up(last)  # far behind: the read model knows them
                        continue
                    if isinstance(found, Recorded):
                        return found, False
                    if isinstance(found, int):  # our own copy, byte for byte
                        return self._appended(subject, key, Recorded(event_id, found, digest))
                    self._known[subject] = last
                try:
                    ack: PubAck = await self.publisher.publish(
                        subject, data, None, expected_last_subject_seq=last
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
                return self._appended(subject, key, Recorded(event_id, ack.seq, digest))

    def _appended(
        self, subject: str, key: tuple[str, str, str], rec: Recorded
    ) -> tuple[Recorded, bool]:
        self._last[subject] = self._known[subject] = rec.seq
        self._recent[key] = rec
        self._order.append((rec.seq, key))
        return rec, True

    async def _between(
        self, subject: str, after: int, upto: int, ref: str, data: bytes
    ) -> Recorded | int | _TooMany | None:
        """The shard's events in ``(after, upto]``: the export ``ref`` as recorded if it is
        among them, the sequence of ``data`` itself (our own copy), None if neither, or
        ``_TOO_MANY`` when there are more than :data:`SCAN_MAX` to read."""
        seq = after + 1
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
                    return None
                raise Unreadable(str(exc)) from None
            except (KeyError, ValueError) as exc:
                raise Unreadable(f"the shard's event after {seq - 1}: {exc}") from None
            if at > upto:
                return None
            if raw == data:
                return at
            try:
                event = decode(raw)
            except EventError as exc:
                raise Unreadable(f"the event at {at}: {exc}") from None
            payload = event.payload
            if isinstance(payload, FeedserExport | VexerExport) and payload.ref == ref:
                return Recorded(event.id, at, export_digest(payload))
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
