"""Hybrid logical clock (Kulkarni et al., 2014).

Timestamps are ``{physical_ms}:{logical}:{node}``. The clock never issues a timestamp below
one it issued before, across restarts: before it issues a physical time at or past its saved
*ceiling* it saves a new ceiling ``reserve_ms`` (at most 1 s) ahead, and at shutdown it saves
its exact state. So a crash followed by a wall clock that went back resumes above everything
already issued, and a restart after a crash stamps at most ``reserve_ms`` above
max(wall clock, last issued) — well inside the other processes' ``max_clock_skew``.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import msgspec

from streamproc import metrics

NODE_RE = re.compile(r"[A-Za-z0-9._-]{1,32}")
_TS_RE = re.compile(r"([0-9]{1,19}):([0-9]{1,9}):([A-Za-z0-9._-]{1,32})")
HLC_PATTERN = r"^[0-9]{1,19}:[0-9]{1,9}:[A-Za-z0-9._-]{1,32}(?!\n)$"
"""The wire pattern of a timestamp string (msgspec and JSON Schema use it)."""
NODE_WIDTH = 32
KEY_WIDTH = 8 + 4 + NODE_WIDTH
MAX_LOGICAL = 999_999_999
"""Nine digits, as the wire pattern allows; on overflow the clock borrows the next ms."""
MAX_RESERVE_MS = 1_000
"""The most a saved ceiling may lie ahead of the last issued time: what a restart after a
crash can run ahead by (other processes refuse timestamps ``max_clock_skew`` ahead)."""
log = logging.getLogger(__name__)


# Every issued timestamp updates both (the event loop issues them; its lock orders the rest).
_tick = metrics.loop_counter(metrics.HLC_TICKS)
_offset = metrics.loop_gauge(metrics.HLC_OFFSET)


class HlcError(ValueError):
    """A malformed timestamp string or node id."""


class ClockSkewError(Exception):
    """A remote timestamp too far ahead of the local wall clock; refused, not merged."""

    def __init__(self, remote: Timestamp, local_ms: int, max_skew_ms: int) -> None:
        self.remote = remote
        self.ahead_ms = remote.physical - local_ms
        super().__init__(
            f"timestamp {remote} is {self.ahead_ms} ms ahead of the local clock "
            f"(max_clock_skew {max_skew_ms} ms)"
        )


def validate_node(node: str) -> str:
    if not isinstance(node, str) or not NODE_RE.fullmatch(node):
        raise HlcError(f"invalid HLC node id {node!r}: 1-32 characters of [A-Za-z0-9._-]")
    return node


class Timestamp(NamedTuple):
    """Orders as the tuple (physical, logical, node), which is also the key order."""

    physical: int
    logical: int
    node: str

    def __str__(self) -> str:
        return f"{self.physical}:{self.logical}:{self.node}"

    @classmethod
    def parse(cls, text: str) -> Timestamp:
        m = _TS_RE.fullmatch(text) if isinstance(text, str) else None
        if m is None:
            raise HlcError(
                f"malformed HLC timestamp {text!r}: want physical:logical:node with ASCII "
                f"digits (at most 19 and 9) and a node of [A-Za-z0-9._-]{{1,32}}"
            )
        return cls(int(m.group(1)), int(m.group(2)), m.group(3))

    def key(self) -> bytes:
        """Fixed-width binary form whose byte order equals the tuple order."""
        node = self.node.encode("ascii")
        return (
            self.physical.to_bytes(8, "big")
            + self.logical.to_bytes(4, "big")
            + node
            + b"\x00" * (NODE_WIDTH - len(node))
        )

    @classmethod
    def from_key(cls, key: bytes) -> Timestamp:
        if len(key) != KEY_WIDTH:
            raise HlcError(f"HLC key must be {KEY_WIDTH} bytes, got {len(key)}")
        node = key[12:].rstrip(b"\x00").decode("ascii")
        return cls(int.from_bytes(key[:8], "big"), int.from_bytes(key[8:12], "big"), node)


def sort_key(text: str) -> tuple[int, int, str]:
    """Order key of an already validated timestamp string (no re-validation: hot paths)."""
    physical, logical, node = text.split(":", 2)
    return int(physical), int(logical), node


class _Persisted(msgspec.Struct):
    physical: int
    logical: int


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


class HybridLogicalClock:
    """Thread-safe HLC with skew refusal and crash-safe persistence of its high-water mark."""

    def __init__(
        self,
        node: str,
        *,
        state_file: Path | None = None,
        max_clock_skew_ms: int = 5_000,
        reserve_ms: int = MAX_RESERVE_MS,
        wall: Callable[[], int] = wall_ms,
    ) -> None:
        self.node = validate_node(node)
        if not 1 <= reserve_ms <= MAX_RESERVE_MS:
            raise ValueError(f"HLC reserve {reserve_ms} ms: 1..{MAX_RESERVE_MS}")
        self.max_clock_skew_ms = max_clock_skew_ms
        self._reserve = reserve_ms
        self._wall = wall
        self._file = state_file
        self._lock = threading.Lock()
        self._l = 0
        self._c = 0
        self._ceiling = 0
        if state_file is not None and state_file.exists():
            saved = msgspec.json.decode(state_file.read_bytes(), type=_Persisted)
            self._l, self._c = saved.physical, saved.logical
            self._ceiling = saved.physical
            ahead = saved.physical - wall()
            if ahead > reserve_ms:  # a wall clock that went back, or an older, wider ceiling
                log.warning(
                    "HLC %s resumes %d ms ahead of the wall clock (its saved mark): it never "
                    "issues below what it issued before",
                    node,
                    ahead,
                )

    def now(self) -> Timestamp:
        """Send / local event rule: ``l' = max(l, pt)``; ``c`` advances only if ``l`` stayed."""
        with self._lock:
            pt = self._wall()
            l_new = max(self._l, pt)
            self._c = self._c + 1 if l_new == self._l else 0
            self._l = l_new
            return self._issue(pt)

    def receive(self, remote: Timestamp | str) -> Timestamp:
        """Merge a remote timestamp; the result is later than both it and anything issued."""
        if isinstance(remote, str):
            remote = Timestamp.parse(remote)
        with self._lock:
            pt = self._wall()
            if remote.physical - pt > self.max_clock_skew_ms:
                metrics.HLC_SKEW_REJECTIONS.inc()
                raise ClockSkewError(remote, pt, self.max_clock_skew_ms)
            lm, cm = remote.physical, remote.logical
            l_new = max(self._l, lm, pt)
            if l_new == self._l == lm:
                c = max(self._c, cm) + 1
            elif l_new == self._l:
                c = self._c + 1
            elif l_new == lm:
                c = cm + 1
            else:
                c = 0
            self._l, self._c = l_new, c
            return self._issue(pt)

    def check_skew(self, remote: Timestamp) -> None:
        """Refuse (and count) a timestamp too far ahead without merging it."""
        pt = self._wall()
        if remote.physical - pt > self.max_clock_skew_ms:
            metrics.HLC_SKEW_REJECTIONS.inc()
            raise ClockSkewError(remote, pt, self.max_clock_skew_ms)

    def _issue(self, pt: int) -> Timestamp:
        if self._c > MAX_LOGICAL:
            # Logical overflow: borrow the next millisecond rather than wrap.
            self._l += 1
            self._c = 0
        if self._file is not None and self._l >= self._ceiling:
            # Saved before it is used: a crash resumes at most ``reserve`` above this issue.
            self._ceiling = self._l + self._reserve
            self._write(_Persisted(self._ceiling, 0))
        _tick()
        _offset((self._l - pt) / 1000.0)
        return Timestamp(self._l, self._c, self.node)

    def close(self) -> None:
        """Persist the exact state, so the next start resumes just above the last issue."""
        with self._lock:
            if self._file is not None:
                self._write(_Persisted(self._l, self._c))
                self._ceiling = self._l

    def _write(self, state: _Persisted) -> None:
        assert self._file is not None
        self._file.parent.mkdir(parents=True, exist_ok=True)
        tmp = self._file.with_suffix(".tmp")
        with open(tmp, "wb") as f:
            f.write(msgspec.json.encode(state))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self._file)
