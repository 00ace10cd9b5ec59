"""What the preview route needs from an impact index, as a protocol: the gateway does not
own the index; a process that has one hands it over through ``IMPACT_PREVIEW``."""

from __future__ import annotations

from collections.abc import Collection
from typing import Protocol, runtime_checkable

from aiohttp import web

from streamproc.impact.selector import Selector


class ImpactResult(Protocol):
    @property
    def count(self) -> int: ...

    @property
    def unmatched(self) -> list[str]: ...

    @property
    def usage_unknown(self) -> int: ...

    def sample(self, n: int) -> list[str]: ...


@runtime_checkable
class ImpactPreview(Protocol):
    def resolve_by_purls(
        self, keys: Collection[str], *, usage_only: bool, selector: Selector
    ) -> ImpactResult: ...

    def resolve_all(self, selector: Selector) -> ImpactResult: ...


IMPACT_PREVIEW = web.AppKey("impact_preview", ImpactPreview)
"""Set ``app[IMPACT_PREVIEW] = index`` from another role's ``routes`` hook to enable
``POST /preview/impact`` in this process (looked up per request, so hook order is free)."""
