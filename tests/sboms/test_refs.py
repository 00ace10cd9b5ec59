"""The SBOM reference fold: counts over every tenant's images, a release when the last use
goes, taken back by a use before the deletion, ended by ``sbom.deleted`` (pure, no I/O)."""

from __future__ import annotations

from streamproc.events import payloads as p
from streamproc.events.envelope import encode, new_event
from streamproc.runtime.projection import Folded, Folder
from streamproc.sboms.refs import SbomRefs, known, released_before, users
from streamproc.state import keys
from streamproc.state.store import MemoryStore
from tests.samples import digest

X = "sha256:" + "a" * 64
Y = "sha256:" + "b" * 64
T0 = 1_767_225_600_000


class Log:
    """Events folded one at a time into a memory store, each at ``T0 + seq`` ms."""

    def __init__(self) -> None:
        self.store = MemoryStore()
        self.seq = 0

    def fold(self, kind: str, tenant: str, payload: p.Payload, eid: str = "") -> Folded:
        self.seq += 1
        hlc = f"{T0 + self.seq}:0:n1"
        e = new_event(kind, tenant, payload, hlc, event_id=eid or f"e{self.seq}")
        msg = (self.seq, f"scheduler.events.{tenant}.x.{self.seq}", encode(e))
        return Folder(self.store, [SbomRefs()]).apply([msg], keys.Checkpoint("S", "e", self.seq))

    def index(self, tenant: str, n: int, sbom: str | None) -> Folded:
        img = p.ImageIndexed(digest=digest(n), registry="r", repository="a", sbom=sbom)
        return self.fold("image.indexed", tenant, img)

    def remove(self, tenant: str, n: int) -> Folded:
        return self.fold("image.removed", tenant, p.ImageRemoved(digest=digest(n)))

    def released(self) -> dict[str, tuple[int, str, str]]:
        return {
            r.name: (r.release.at, r.release.tenant, r.release.by)
            for r in released_before(self.store, 2**62)
        }


def test_the_last_image_of_any_tenant_releases_the_sbom() -> None:
    log = Log()
    log.index("acme", 1, X)
    log.index("beta", 2, X)  # the same document sent by another tenant: one stored object
    log.index("acme", 3, X)
    assert users(log.store, X) == 3
    log.remove("acme", 1)
    log.remove("acme", 3)
    assert log.released() == {} and users(log.store, X) == 1
    log.remove("beta", 2)
    assert log.released() == {X: (T0 + 6, "beta", "e6")}
    assert users(log.store, X) == 0 and known(log.store, X)
    assert list(released_before(log.store, T0 + 5)) == []  # released after that time


def test_reindexing_with_another_sbom_releases_the_old_one_and_a_use_takes_a_release_back() -> None:
    log = Log()
    log.index("acme", 1, X)
    log.index("acme", 1, X)  # the same content again: nothing changes
    assert users(log.store, X) == 1
    log.index("acme", 1, Y)
    assert log.released() == {X: (T0 + 3, "acme", "e3")} and users(log.store, Y) == 1
    log.index("acme", 2, X)  # used again before the deletion
    assert log.released() == {} and users(log.store, X) == 1
    log.index("acme", 2, None)  # re-indexed by a producer that keeps no SBOM
    assert set(log.released()) == {X}


def test_sbom_deleted_ends_its_release_and_only_that_release() -> None:
    log = Log()
    log.index("acme", 1, X)
    log.remove("acme", 1)  # e2 releases X
    log.index("acme", 1, X)
    log.remove("acme", 1)  # e4 releases it again: a stale deletion names e2
    stale = log.fold("sbom.deleted", "acme", p.SbomDeleted(sbom=X, released_by="e2"))
    assert [r.reason for r in stale.rejected] == ["sbom_not_released"]
    assert set(log.released()) == {X}
    done = log.fold("sbom.deleted", "acme", p.SbomDeleted(sbom=X, released_by="e4"))
    assert done.rejected == [] and log.released() == {} and not known(log.store, X)
    again = log.fold("sbom.deleted", "acme", p.SbomDeleted(sbom=X, released_by="e4"))
    assert [r.reason for r in again.rejected] == ["sbom_not_released"]


def test_images_without_a_kept_sbom_count_for_nothing_and_unknown_removals_are_rejected() -> None:
    log = Log()
    log.index("acme", 1, None)
    assert log.remove("acme", 1).rejected == []
    assert [r.reason for r in log.remove("acme", 1).rejected] == ["image_not_indexed"]
    assert log.released() == {} and not known(log.store, X)
