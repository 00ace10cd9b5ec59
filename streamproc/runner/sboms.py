"""Which SBOM each image was indexed with, for the tool backends: (tenant, digest) → the
SBOM store name ``image.indexed`` gives (empty when it names none). Pure fold."""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

from streamproc.events.envelope import Envelope
from streamproc.events.payloads import ImageIndexed, ImageRemoved
from streamproc.names import RUNNER_SBOMS_CF
from streamproc.runtime.fold import folds
from streamproc.runtime.projection import Projection, Rejection
from streamproc.state.store import Store
from streamproc.state.tx import Tx

CF = RUNNER_SBOMS_CF


def _key(tenant: str, digest: str) -> bytes:
    return f"{tenant}\x00{digest}".encode()


class RunnerSboms(Projection):
    name: ClassVar[str] = RUNNER_SBOMS_CF
    creates: ClassVar[frozenset[str]] = frozenset({"image.indexed"})
    families: ClassVar[tuple[str, ...]] = (CF,)

    @folds(ImageIndexed)
    def _indexed(self, tx: Tx, event: Envelope, p: ImageIndexed) -> None:
        tx.table(CF).put(_key(event.tenant, p.digest), (p.sbom or "").encode())

    @folds(ImageRemoved)
    def _removed(self, tx: Tx, event: Envelope, p: ImageRemoved) -> None:
        table = tx.table(CF)
        k = _key(event.tenant, p.digest)
        if table.get(k) is None:
            raise Rejection(
                "image_not_indexed", f"image {p.digest} of tenant {event.tenant} is not indexed"
            )
        table.delete(k)


def sbom_reader(store: Store) -> Callable[[str, str], str | None]:
    """``(tenant, digest) -> name`` over committed state: ``""`` for an image indexed
    without its SBOM kept, None for an image that is not indexed."""

    def sbom_of(tenant: str, digest: str) -> str | None:
        raw = store.get(CF, _key(tenant, digest))
        return raw.decode() if raw is not None else None

    return sbom_of
