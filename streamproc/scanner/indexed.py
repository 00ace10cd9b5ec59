"""Reads of the reference scanner's folded catalog (:mod:`streamproc.scanner.images`) for
its handlers, apart from the fold: these wait on the log, the fold stays pure."""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

from streamproc.bus import jsapi
from streamproc.scanner.images import (
    CF,
    SEP,
    image_entry,
    image_key,
    sbom_entry,
    stored_sbom_key,
)
from streamproc.state.store import Store


class IndexedImages:
    """Reads of the folded catalog for the scanner's handlers (committed state only), and
    a way to wait until the log's head is folded."""

    def __init__(
        self, store: Store, catch_up: Callable[[float], Awaitable[None]] | None = None
    ) -> None:
        self.store = store
        self._catch_up = catch_up

    @classmethod
    def of(cls, system: Any, role: str = "scanner") -> IndexedImages:
        """The catalog of a :class:`~streamproc.runtime.app.System` that hosts the scanner role."""
        proj = system.projectors[role]
        store = system.stores[system.roles.index(role)]
        stream = system.settings.events_stream

        async def catch_up(timeout: float) -> None:
            info = await jsapi.stream_info(system.nc, stream)
            if info is not None and info.state.last_seq > proj.applied:
                await proj.wait_for(info.state.last_seq, timeout)

        return cls(store, catch_up)

    def sbom_of(self, tenant: str | None, digest: str) -> str | None:
        """The image's SBOM key; without a tenant, that of the first tenant holding the
        digest (a digest names one content, whoever indexed it)."""
        if tenant is not None:
            raw = self.store.get(CF, image_key(tenant, digest))
            return None if raw is None else image_entry.decode(raw).sbom_key
        prefix = b"d" + digest.encode() + SEP
        for k, _ in self.store.scan(CF, prefix):
            return self.sbom_of(k[len(prefix) :].decode(), digest)
        return None

    def purls(self, key: str) -> list[str] | None:
        raw = self.store.get(CF, stored_sbom_key(key))
        return None if raw is None else sbom_entry.decode(raw).purls

    def count(self) -> int:
        return sum(1 for _ in self.store.scan(CF, b"i"))

    async def catch_up(self, timeout: float) -> None:
        """Until what is on the log now is folded: a miss may be an image indexed a
        moment ago. Gives up quietly after ``timeout`` (the caller answers 404)."""
        if self._catch_up is not None:
            with contextlib.suppress(TimeoutError):
                await self._catch_up(timeout)
