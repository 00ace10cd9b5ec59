"""The planner's NATS service: impact previews, answered from the ImpactIndex it folds.

Every planner instance serves previews — the active one and the standbys, whose index is as
current as the active's (they fold the same log) — once its projections have caught up with
the stream head as it was when the process started; from then on NATS hands each question to
one of them (a queue group). The gateway asks with a deadline (``POST /preview/impact``).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Protocol, cast

import msgspec
from nats.aio.client import Client

from streamproc.bus import services
from streamproc.bus.services import Served, ServiceFailure
from streamproc.impact.selector import Selector, SelectorError
from streamproc.planner.reactor import IMPACT
from streamproc.queries import PLANNER, PREVIEW, PreviewQuery, PreviewResult, read_query
from streamproc.reactor import RoleContext

MAX_UNMATCHED_SHOWN = 100


class ImpactResult(Protocol):
    @property
    def count(self) -> int: ...

    @property
    def unmatched(self) -> list[str]: ...

    @property
    def usage_unknown(self) -> int: ...

    def sample(self, n: int) -> list[str]: ...


class ImpactIndex(Protocol):
    """What a preview needs of the index (the ``impact`` projection is one)."""

    def resolve_by_purls(
        self, keys: Collection[str], *, usage_only: bool, selector: Selector
    ) -> ImpactResult: ...

    def resolve_all(self, selector: Selector) -> ImpactResult: ...


_query = msgspec.json.Decoder(PreviewQuery)
_encode = msgspec.json.Encoder().encode


def preview(index: ImpactIndex, query: PreviewQuery) -> PreviewResult:
    """The impact of ``query.request`` within ``query.tenant``'s images only."""
    body = query.request
    sel = body.selection
    try:
        selector = Selector(
            tenant=query.tenant,
            namespaces=list(sel.namespaces),
            repos=list(sel.repositories),
            labels=list(sel.labels),
            digests=list(sel.digests),
            include_tags=list(sel.include_tags),
        )
        if body.product_keys:
            result = index.resolve_by_purls(
                body.product_keys, usage_only=body.usage_only, selector=selector
            )
        else:
            result = index.resolve_all(selector)
    except (SelectorError, ValueError) as exc:
        raise ServiceFailure(400, "invalid-body", str(exc), field="$.productKeys") from None
    unmatched = list(result.unmatched)
    return PreviewResult(
        count=result.count,
        sample=result.sample(body.sample_size),
        unmatched=unmatched[:MAX_UNMATCHED_SHOWN],
        unmatched_count=len(unmatched),
        usage_unknown=result.usage_unknown,
    )


async def serve_previews(nc: Client, prefix: str, index: ImpactIndex, *, node: str = "") -> Served:
    async def answer(data: bytes) -> bytes:
        return _encode(preview(index, read_query(_query, data)))

    return await services.serve(
        nc,
        prefix,
        PLANNER,
        {PREVIEW: answer},
        description="impact previews from the planner's ImpactIndex",
        metadata={"node": node},
    )


async def start(ctx: RoleContext) -> Served:
    """The ``services`` hook of the planner role."""
    index = cast(ImpactIndex, ctx.shared[IMPACT])
    nc = ctx.publisher.nc
    return await serve_previews(nc, ctx.settings.prefix, index, node=ctx.settings.node_id)
