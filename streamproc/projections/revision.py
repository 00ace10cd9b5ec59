"""Which revision of an export a fold may take, declared once for every projection that keeps
exports (the read model's ``rm_exports``, the planner's ``pl_exports``): the first creates the
export; a later one needs it (updates never create) and must be past the latest folded."""

from __future__ import annotations

from streamproc.runtime.projection import Rejection


def check_revision(kind: str, ref: str, revision: int, latest: int | None) -> None:
    """Raise the named rejection unless ``revision`` may follow ``latest`` (None: the
    export is unknown here)."""
    if latest is None and revision > 1:
        raise Rejection(
            "unknown_export", f"revision {revision} of {kind} export {ref}, never recorded"
        )
    if latest is not None and revision <= latest:
        raise Rejection("duplicate_export", f"{kind} export {ref} is at revision {latest}")
