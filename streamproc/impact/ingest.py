"""Changing the index: index, re-index and remove images; fold advisories into the vuln map.

The hot path (a new image whose purls are all known in the open chunk) is a handful of
C-level calls: one dict lookup per purl and one append of the image id per purl to the open chunk's
pending ids (:mod:`streamproc.impact.columns`), and with deferred merging one msgpack
encode of its purls, its stored pending entry (:mod:`streamproc.impact.pending`).
Everything that may refuse the image (an unparseable purl, a product key that is not the
purl's prefix) is checked before anything changes, so a refused image leaves no trace.
Re-indexing strips the image from everything its old record names, then adds it again, and
finally drops bitmaps and groups that ended up empty: nothing stale is left, and the result
depends only on the events, never on where batch boundaries fell.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from functools import partial
from itertools import compress
from operator import is_

from pyroaring import BitMap

from streamproc.impact import keys as K
from streamproc.impact.columns import OpenChunk, strip_chunk
from streamproc.impact.groups import Group
from streamproc.impact.pending import Pending
from streamproc.impact.records import ImageRecord, encode_record
from streamproc.sbom.image import ImageError, IndexedImage
from streamproc.sbom.purls import (
    check_component,
    check_key_count,
    check_parseable,
    is_product_key,
    normalize_purl,
)

_is_none = partial(is_, None)


class Ingest(Pending):
    def index_image(self, rec: IndexedImage) -> int:
        """Add or replace an image; returns its id (unchanged on re-index)."""
        return self.index_components(
            rec.tenant,
            rec.digest,
            rec.purls,
            rec.product_keys,
            rec.used,
            registry=rec.registry,
            repo=rec.repo,
            namespace=rec.namespace,
            tags=rec.tags,
            labels=rec.labels,
            usage_known=rec.usage_known,
        )

    def index_components(
        self,
        tenant: str,
        digest: str,
        purls: Sequence[str],
        pks: Sequence[str],
        used: Sequence[bool],
        *,
        registry: str = "",
        repo: str = "",
        namespace: str = "",
        tags: Iterable[str] = (),
        labels: Mapping[str, str] | None = None,
        usage_known: bool | None = None,
    ) -> int:
        """Index one image from aligned purls / product keys / used flags (raises PurlError,
        TooManyKeysError or ImageError, before changing anything). ``pks`` is only read for
        purls new to the image's chunk, so it may be a lazy sequence. ``usage_known``
        None means: known when any component is used (events from before the flag)."""
        n = len(purls)
        check_key_count(n)
        if len(pks) != n or len(used) != n:
            raise ImageError("purls, productKeys and used must have the same length")
        if not tenant or K.SEP in tenant or not digest:
            raise ImageError("an image needs a tenant (without NUL) and a digest")
        dkey = K.scoped(tenant, digest)
        iid = self._digests.get(dkey)
        stripped: tuple[list[int], list[bytes]] | None = None
        if iid is None:
            iid = self._next_id()
            chunk = iid >> K.CHUNK_BITS
            found = self._resolve(purls, pks, chunk, validate=True)
            if iid == len(self._digest_by_id):
                self._digest_by_id.append(digest)
            else:
                self._free.remove(iid)
                self._digest_by_id[iid] = digest
            self._digests[dkey] = iid
            self._dirty_names.add(K.DIGEST + dkey.encode())
        else:
            chunk = iid >> K.CHUNK_BITS
            old = self._record(iid)
            self._resolve(purls, pks, chunk, validate=True, create=False)
            stripped = self._strip(iid, old, chunk)
            found = self._resolve(purls, pks, chunk, validate=False)
        self._open[chunk].add(iid, purls, used)
        if self.defer:  # merged batches later: stored image-major until then
            self._add_delta(iid, list(purls), list(used), found)
        gids = K.bitmap(found)
        tag_list = sorted(set(tags))
        label_map = dict(labels or {})
        known = True in used if usage_known is None else usage_known
        for key in K.owner_keys(tenant, registry, repo, namespace, tag_list, label_map, known):
            self._owner_add(key, iid)
        if stripped is not None:
            self._prune(stripped[0], stripped[1], gids)
        rec = ImageRecord(
            tenant, digest, registry, repo, namespace, tag_list, label_map, list(gids), known
        )
        self._records[iid] = encode_record(rec)
        self._dirty_records.add(iid)
        return iid

    def remove_image(self, tenant: str, digest: str) -> bool:
        """Forget an image and free its id; False when it was not indexed."""
        dkey = K.scoped(tenant, digest)
        iid = self._digests.get(dkey)
        if iid is None:
            return False
        chunk = iid >> K.CHUNK_BITS
        gids, owners = self._strip(iid, self._record(iid), chunk)
        self._prune(gids, owners, K.bitmap())
        self._records.pop(iid, None)
        self._dirty_records.add(iid)
        del self._digests[dkey]
        self._dirty_names.add(K.DIGEST + dkey.encode())
        self._digest_by_id[iid] = None
        self._free.add(iid)
        return True

    # -- resolving purls to their groups ---------------------------------------------------
    def _resolve(
        self,
        purls: Sequence[str],
        pks: Sequence[str],
        chunk: int,
        *,
        validate: bool,
        create: bool = True,
    ) -> list[int]:
        """Every purl's group id. Purls not yet checked in the chunk are validated (when
        ``validate``) before any group is created; with ``create=False`` only validates.
        No group is loaded: the pending ids are merged into the groups later
        (:mod:`streamproc.impact.pending`)."""
        oc = self._open.get(chunk)
        if oc is None:
            oc = self._open[chunk] = OpenChunk()
        fc = oc.flat
        found: list[int | None] = list(map(fc.get, purls))
        if None not in found:
            return found  # type: ignore[return-value]  # no None in found (checked above)
        missing = list(compress(range(len(found)), map(_is_none, found)))
        if validate:
            for i in missing:
                check_component(purls[i], pks[i])
        if not create:
            return []
        gids = self._gids
        for i in missing:
            purl = purls[i]
            gid = fc.get(purl)  # a purl listed twice in one image
            if gid is None:
                pk = pks[i]
                gid = gids.get(pk)
                if gid is None:
                    gid = self._new_group(pk).gid
                fc[purl] = gid  # the product's own id object: no int per purl
            found[i] = gid
        return found  # type: ignore[return-value]  # every None slot was filled in the loop

    # -- stripping and pruning (re-index, removal) -----------------------------------------
    def _strip(self, iid: int, old: ImageRecord, chunk: int) -> tuple[list[int], list[bytes]]:
        """Take ``iid`` out of every member its record's groups hold in its chunk (members
        left empty go at once, with their checked purls); empty groups are pruned later."""
        self._settle()
        groups, by_gid = self._groups, self._pk_by_gid
        if self.source is not None:
            cold = [pk for gid in old.gids if (pk := by_gid[gid]) not in groups]
            if cold:
                self._load_groups(cold)  # type: ignore[arg-type]  # an indexed image's gids are live, so their product keys are not None
        oc = self._open.get(chunk)
        fc = oc.flat if oc is not None else {}
        touched: list[Group] = []
        for gid in old.gids:
            g = groups[by_gid[gid]]  # type: ignore[index]  # as above
            self._stale(g)
            raw = g.chunks.get(chunk)
            if raw is None:
                continue
            new, changed, emptied = strip_chunk(raw, gid, iid)
            if changed:
                g.set_chunk(chunk, new)
                touched.append(g)
            for s in emptied:
                fc.pop(g.pk + s, None)
        self._mark_dirty(chunk, old.gids)
        if self._lru is not None and touched:
            self._lru.set_many([g.pk for g in touched], [g.size() for g in touched])
        owners = K.owner_keys(
            old.tenant, old.registry, old.repo, old.namespace, old.tags, old.labels, old.usage_known
        )
        for key in owners:
            bm = self._owner(key)
            if bm is not None:
                bm.discard(iid)
                self._dirty_owners.add(key)
        return old.gids, owners

    def _prune(self, gids: list[int], owners: list[bytes], kept: BitMap) -> None:
        """Drop the groups and owner bitmaps a strip emptied and the re-add (its groups:
        ``kept``) did not refill."""
        for gid in gids:
            pk = self._pk_by_gid[gid]
            if pk is None or gid in kept:
                continue
            g = self._groups.get(pk)
            if g is not None and g.gid == gid and not g.chunks:
                self._delete_group(g)
        for key in owners:
            bm = self._owners.get(key)
            if bm is not None and not bm:
                self._owner_delete(key)

    def _delete_group(self, g: Group) -> None:
        gdir = self._gdir[g.gid]
        stored = [int.from_bytes(gdir[i : i + 2], "big") for i in range(4, len(gdir), 2)]
        self._dead.extend(K.group_key(g.gid, c) for c in {*stored, *g.chunks})
        self._drop_group(g)
        if self._lru is not None:
            self._lru.drop(g.pk)
        del self._gids[g.pk]
        self._dirty_names.add(K.PRODUCT + g.pk.encode())
        self._pk_by_gid[g.gid] = None
        self._gdir[g.gid] = b""
        self._free_gids.add(g.gid)

    # -- owners ----------------------------------------------------------------------------
    def _owner_add(self, key: bytes, iid: int) -> None:
        bm = self._owner(key)
        if bm is None:
            bm = self._owners[key] = K.bitmap()
            if key[:1] == K.OWNER_TAG:
                tenant, _, tag = key[1:].decode().partition(K.SEP)
                self._tags.setdefault(tenant, set()).add(tag)
                self._dirty_names.add(K.TAGS + tenant.encode())
        bm.add(iid)
        self._dirty_owners.add(key)

    def _owner_delete(self, key: bytes) -> None:
        del self._owners[key]
        if self._lru is not None:
            self._lru.drop(key)
        self._dirty_owners.add(key)
        if key[:1] == K.OWNER_TAG:
            tenant, _, tag = key[1:].decode().partition(K.SEP)
            self._tags.get(tenant, set()).discard(tag)
            if not self._tags.get(tenant):
                self._tags.pop(tenant, None)
            self._dirty_names.add(K.TAGS + tenant.encode())

    # -- the vuln map ----------------------------------------------------------------------
    def add_vuln_keys(self, vuln_id: str, keys: Iterable[str]) -> None:
        """Fold a Feedser export row: the vuln also affects these product keys/purls."""
        norm = {canonical_key(k) for k in keys}
        cur = self._vulns.get(vuln_id, set())
        if not norm <= cur:
            self._vulns[vuln_id] = cur | norm
            self._dirty_names.add(K.VULN + vuln_id.encode())

    def set_vuln_keys(self, vuln_id: str, keys: Iterable[str]) -> None:
        """Replace a vuln's keys (an empty list forgets the vuln)."""
        norm = {canonical_key(k) for k in keys}
        if norm:
            self._vulns[vuln_id] = norm
        elif self._vulns.pop(vuln_id, None) is None:
            return
        self._dirty_names.add(K.VULN + vuln_id.encode())

    def vuln_keys(self, vuln_id: str) -> set[str]:
        return set(self._vulns.get(vuln_id, ()))


def canonical_key(key: str) -> str:
    """Keys stay as given when they already are a plain purl (the common case, ~1 µs);
    anything else is parsed and normalised (raises PurlError for garbage)."""
    check_parseable(key)
    if "%" not in key and key == key.lower():
        return key
    n = normalize_purl(key)
    return n.product_key if is_product_key(n) else n.purl
