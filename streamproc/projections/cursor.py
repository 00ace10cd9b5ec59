"""The impact cursor: per tenant, the latest export of each source that a planned run covers.

The planner (``pl_cursors``, which also keeps its coalescing windows) and the read model
(``rm_cursors``, what ``GET /impact-cursors`` shows) both fold it, from the same events and by
the same rule, declared once here: a run advances its source's cursor when its
``run.planned`` is folded and no cancel came before it, to the export it covers that was
recorded last — by HLC time, then by ref — unless a later one is already there.
"""

from __future__ import annotations

from typing import Literal, TypeVar

import msgspec

Source = Literal["feedser", "vexer"]
C = TypeVar("C", bound="CursorBase")


class CursorBase(msgspec.Struct, kw_only=True):
    """Each source's latest export: its ref (``<source>:<exportId>``) and HLC time (ms).

    Stored as msgpack maps in this field order, before any field a projection adds."""

    feedser_last_export_id: str | None = None
    feedser_ms: int = 0
    vexer_last_export_id: str | None = None
    vexer_ms: int = 0

    def last(self, source: Source) -> tuple[int, str]:
        if source == "feedser":
            return self.feedser_ms, self.feedser_last_export_id or ""
        return self.vexer_ms, self.vexer_last_export_id or ""


def later(cur: CursorBase, source: Source, ref: str, ms: int) -> bool:
    """Whether the export ``ref`` recorded at ``ms`` moves ``source``'s cursor forward."""
    return (ms, ref) > cur.last(source)


def advanced(cur: C, source: Source, ref: str, ms: int, **extra: object) -> C:
    """``cur`` with ``source`` at ``ref`` (plus ``extra`` fields), if that is later; else
    ``cur`` itself."""
    if not later(cur, source, ref, ms):
        return cur
    if source == "feedser":
        return msgspec.structs.replace(cur, feedser_last_export_id=ref, feedser_ms=ms, **extra)
    return msgspec.structs.replace(cur, vexer_last_export_id=ref, vexer_ms=ms, **extra)
