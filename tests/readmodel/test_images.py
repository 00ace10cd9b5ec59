"""The images view, folded purely: indexed, replaced, removed, rejected, listed, replayed."""

from __future__ import annotations

from streamproc.events import payloads as p
from streamproc.readmodel.images import Images
from streamproc.sbom.publish import payload_digest
from streamproc.state.digest import state_digest
from tests.readmodel.util import Log


def image(n: int, *, used: tuple[int, ...] = (), **kw: object) -> p.ImageIndexed:
    comps = [
        p.Component(purl="pkg:pypi/a@1", product_key="pkg:pypi/a", used=0 in used),
        p.Component(purl="pkg:pypi/a@2", product_key="pkg:pypi/a", used=1 in used),
        p.Component(purl="pkg:deb/debian/b@3", product_key="pkg:deb/debian/b", used=2 in used),
    ]
    fields: dict[str, object] = {
        "digest": f"sha256:{n:064x}",
        "registry": "ghcr.io",
        "repository": "org/app",
        "namespace": "prod",
        "tags": ["1.0"],
        "labels": {"team": "x"},
        "components": comps,
    }
    fields.update(kw)
    return p.ImageIndexed(**fields)  # type: ignore[arg-type]


def test_indexed_replaced_removed() -> None:
    log = Log()
    first = image(1)
    seq = log.emit("image.indexed", first)
    rec = log.rm.image("t1", first.digest)
    assert rec is not None
    assert (rec.purls, rec.product_keys, rec.used_purls, rec.usage_known) == (3, 2, 0, False)
    assert (rec.registry, rec.repository, rec.namespace) == ("ghcr.io", "org/app", "prod")
    assert rec.tags == ["1.0"] and rec.labels == {"team": "x"}
    assert rec.seq == seq and rec.content_sha256 == payload_digest(first)
    assert log.rm.image("t2", first.digest) is None, "another tenant's image is not there"

    second = image(1, used=(0, 2), tags=["1.1"])
    seq2 = log.emit("image.indexed", second)
    rec = log.rm.image("t1", first.digest)
    assert rec is not None and rec.seq == seq2 and rec.tags == ["1.1"]
    assert (rec.used_purls, rec.usage_known) == (2, True)
    assert rec.content_sha256 == payload_digest(second) != payload_digest(first)

    gone = log.emit("image.removed", p.ImageRemoved(digest=first.digest))
    assert log.rejection(gone, Images.name) is None
    assert log.rm.image("t1", first.digest) is None
    again = log.emit("image.removed", p.ImageRemoved(digest=first.digest))
    assert log.rejection(again, Images.name) == "image_not_indexed"
    other = log.emit("image.removed", p.ImageRemoved(digest=image(2).digest), tenant="t2")
    assert log.rejection(other, Images.name) == "image_not_indexed"


def test_listing_pages_and_filters() -> None:
    log = Log()
    for n in range(7):
        log.emit("image.indexed", image(n, namespace="prod" if n % 2 else "dev"))
    log.emit("image.indexed", image(99), tenant="t2")
    seen, cursor = [], None
    while True:
        page = log.rm.images("t1", limit=3, cursor=cursor)
        seen += [r.digest for r in page.items]
        cursor = page.next_cursor
        if cursor is None:
            break
    assert seen == sorted(image(n).digest for n in range(7))
    prod = log.rm.images("t1", limit=50, namespace="prod").items
    assert [r.digest for r in prod] == [image(n).digest for n in (1, 3, 5)]
    for repo in ("org/app", "ghcr.io/org/app"):
        assert len(log.rm.images("t1", limit=50, repository=repo).items) == 7
    assert log.rm.images("t1", limit=50, repository="org/other").items == []
    assert [r.digest for r in log.rm.images("t2", limit=50).items] == [image(99).digest]


def test_replay_is_byte_identical() -> None:
    events = [("image.indexed", image(n, used=(n % 3,))) for n in range(5)]
    events += [("image.removed", p.ImageRemoved(digest=image(2).digest))]
    events += [("image.indexed", image(2, tags=["back"]))]
    one, many = Log(), Log()
    stamped = [one.event(k, e, ms=1_700_000_000_000 + i) for i, (k, e) in enumerate(events)]
    one.fold(*stamped)
    for e in stamped:
        many.fold(e)
    assert state_digest(one.store) == state_digest(many.store)
