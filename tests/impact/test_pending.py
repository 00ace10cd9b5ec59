"""Deferred merging (streamproc/impact/pending.py): while ids wait to be merged, every answer
is what a scan of the events gives, a restart reads them back from their stored entries, and
once everything is merged the state is exactly that of merging every batch at once."""

from __future__ import annotations

import pytest

from streamproc.impact import keys as K
from streamproc.impact import pending
from streamproc.impact.index import ImpactIndex
from streamproc.impact.projection import ImpactProjection
from streamproc.impact.selector import Selector
from streamproc.impact.stats import index_stats
from streamproc.runtime.projection import Folder
from streamproc.state import keys
from streamproc.state.store import MemoryStore, Store
from tests.impact.helpers import Model, random_events
from tests.impact.test_index import DIGESTS, RAW_PURLS, image
from tests.impact.test_projection import check_answers, fold, impact_digest

BATCH = 40


@pytest.fixture(autouse=True)
def _small_slices(monkeypatch: pytest.MonkeyPatch) -> None:
    """One group merged per look at the clock, and a zero budget: each flush merges one
    group, so ids stay pending over many batches."""
    monkeypatch.setattr(pending, "MERGE_SLICE", 1)


def deferred() -> ImpactProjection:
    return ImpactProjection(max_bytes=None, warm_on_start=False, merge_budget_s=0.0)


def stored_entries(store: Store) -> int:
    return sum(1 for _ in store.scan(K.NAMES_CF, K.PENDING))


def fold_batches(folder: Folder, events: list, start: int, model: Model) -> None:
    msgs = [(start + i + 1, "subject", e) for i, e in enumerate(events)]
    from streamproc.events.envelope import encode

    for lo in range(0, len(msgs), BATCH):
        part = [(s, subj, encode(e)) for s, subj, e in msgs[lo : lo + BATCH]]
        folder.apply(part, keys.Checkpoint("S", "epoch", part[-1][0]))
        for _, _, e in msgs[lo : lo + BATCH]:
            model.apply(e)


@pytest.mark.parametrize("seed", [3, 4])
def test_answers_are_exact_while_ids_wait_and_the_end_state_is_the_same(seed: int) -> None:
    events = random_events(seed, 600)
    plain = MemoryStore()
    fold(plain, events, sizes=[BATCH])
    store = MemoryStore()
    proj = deferred()
    folder = Folder(store, [proj], "impact")
    model = Model()
    waited = 0
    for k, lo in enumerate(range(0, len(events), 120)):
        fold_batches(folder, events[lo : lo + 120], lo, model)
        if proj.has_deferred():
            waited = max(waited, stored_entries(store))
        check_answers(proj, model, k)  # merges only the groups each query reads
    assert waited > 0, "ids must have waited over batches, stored image-major"
    folder.finish()
    assert not proj.has_deferred()
    assert stored_entries(store) == 0
    assert impact_digest(store) == impact_digest(plain)


def test_a_restart_reads_the_waiting_ids_back_and_applying_them_again_changes_nothing() -> None:
    events = random_events(5, 600)
    plain = MemoryStore()
    fold(plain, events, sizes=[BATCH])
    store = MemoryStore()
    model = Model()
    fold_batches(Folder(store, [deferred()], "impact"), events[:300], 0, model)
    left = stored_entries(store)
    assert left > 0  # some of them partly merged already: a round takes many batches
    again = deferred()  # as after a crash: the stored state only
    folder = Folder(store, [again], "impact")
    assert again.has_deferred()
    check_answers(again, model, 1)
    fold_batches(folder, events[300:], 300, model)
    check_answers(again, model, 2)
    folder.finish()
    assert stored_entries(store) == 0
    assert impact_digest(store) == impact_digest(plain)


def test_a_query_merges_only_the_groups_it_reads() -> None:
    store = MemoryStore()
    store.ensure_families(K.FAMILIES)
    ix = ImpactIndex(source=store, defer=True)
    ix.restore()
    for d, p in zip(DIGESTS[:3], RAW_PURLS[:3], strict=True):
        ix.index_image(image("t1", d, [(p, True), (RAW_PURLS[3], False)]))
    ix._take_open()
    waiting = {gid for per in ix._pend.values() for gid in per}
    openssl, django = ix._gids["pkg:deb/debian/openssl"], ix._gids["pkg:pypi/django"]
    assert waiting == {openssl, django}
    got = ix.resolve_by_purls(["pkg:deb/debian/openssl"], False, Selector(tenant="t1"))
    assert sorted(got.digests()) == sorted(DIGESTS[:3])
    assert {gid for per in ix._pend.values() for gid in per} == {django}
    assert ix.has_pending()
    # another spelling of the other product goes by the query's slow path, merged there
    got = ix.resolve_by_purls(["pkg:PYPI/Django"], False, Selector(tenant="t1"))
    assert sorted(got.digests()) == sorted(DIGESTS[:3])
    assert not ix._pend and not ix._round
    assert ix.has_pending()  # the images' stored entries: the next flush deletes them
    names = ix.dirty_writes(0.0)[K.NAMES_CF]
    assert [names[pending.delta_key(i)] for i in range(3)] == [None, None, None]
    ix.clear_dirty()
    assert not ix.has_pending()


def test_index_stats_count_the_images_waiting_to_be_merged() -> None:
    store = MemoryStore()
    proj = deferred()
    folder = Folder(store, [proj], "impact")
    fold_batches(folder, random_events(7, 200), 0, Model())
    waiting = proj.index.pending_images
    assert waiting > 0
    assert index_stats(store).pending_images == waiting
    folder.finish()
    assert index_stats(store).pending_images == 0
