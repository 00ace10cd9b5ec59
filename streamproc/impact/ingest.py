"""Changing the index: index, re-index and remove images; fold advisories into the vuln map.

The hot path (a new image whose purls are all known in the open chunk) is a handful of
C-level ``map`` calls: one dict lookup and one ``list.append`` per purl, nothing else.
Everything that may refuse the image (an unparseable purl, a product key that is not the
purl's prefix) is checked before anything changes, so a refused image leaves no trace.
Re-indexing strips the image from everything its old record names, then adds it again, and
finally drops bitmaps and groups that ended up empty: nothing stale is left, and the result
depends only on the events, never on where batch boundaries fell.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from functools import partial
from itertools import compress, repeat
from operator import is_, itemgetter
from sys import intern

from pyroaring import BitMap

from streamproc.impact import keys as K
from streamproc.impact.groups import Group, Member, member_empty
from streamproc.impact.records import ImageRecord, encode_record
from streamproc.impact.state import IndexState, consume
from streamproc.sbom.image import ImageError, IndexedImage
from streamproc.sbom.purls import (
    check_component,
    check_key_count,
    check_parseable,
    is_product_key,
    normalize_purl,
)

_append = list.append
_gid_of = itemgetter(0)
_is_none = partial(is_, None)


def _new_member(gid: int) -> Member:
    """An empty member ``[gid]`` with room for three ids: most exact purls hold a few ids
    per chunk, and a list literal grown by ``append`` reserves eight slots (32 bytes more
    for each of the ~10^6 members of a large catalog)."""
    m = [gid, gid, gid, gid]
    del m[1:]
    return m


def _discard(m: Member, iid: int) -> None:
    if len(m) > 1 and type(m[1]) is BitMap:
        m[1].discard(iid)
        if len(m) > 2:
            m[2:] = [x for x in m[2:] if x != iid]
    elif iid in m[1:]:
        m[1:] = [x for x in m[1:] if x != iid]


def _merge(dirty: dict[int, BitMap], chunk: int, gids: BitMap) -> None:
    got = dirty.get(chunk)
    if got is None:
        dirty[chunk] = gids.copy()
    else:
        got |= gids


class Ingest(IndexState):
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
            if chunk in self._closing_chunks:
                self._finish_closing()
            members = self._resolve(purls, pks, chunk, validate=True)
            if iid == len(self._digest_by_id):
                self._digest_by_id.append(digest)
            else:
                self._free.remove(iid)
                self._digest_by_id[iid] = digest
            self._digests[dkey] = iid
            self._dirty_names.add(K.DIGEST + dkey.encode())
        else:
            chunk = iid >> K.CHUNK_BITS
            if chunk in self._closing_chunks:
                self._finish_closing()
            old = self._record(iid)
            self._resolve(purls, pks, chunk, validate=True, create=False)
            stripped = self._strip(iid, old, chunk)
            members = self._resolve(purls, pks, chunk, validate=False)
        consume(map(_append, members, repeat(iid)))
        umembers = self._resolve_used(purls, used, chunk, members) if True in used else []
        consume(map(_append, umembers, repeat(iid)))
        if iid != len(self._digest_by_id) - 1 or stripped is not None or len(set(purls)) != n:
            # not the highest id, or a purl listed twice: restore sorted, unique lists
            for m in (*members, *umembers):
                if type(m[1]) is not BitMap:
                    m[1:] = sorted(set(m[1:]))
        gids = K.bitmap(list(map(_gid_of, members)))
        _merge(self._dirty_chunks, chunk, gids)
        _merge(self._pending, chunk, gids)
        tag_list = sorted(set(tags))
        label_map = dict(labels or {})
        known = True in used if usage_known is None else usage_known
        for key in K.owner_keys(tenant, registry, repo, namespace, tag_list, label_map, known):
            self._owner_add(key, iid)
        if stripped is not None:
            self._prune(stripped[0], stripped[1], chunk)
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
        if chunk in self._closing_chunks:
            self._finish_closing()
        gids, owners = self._strip(iid, self._record(iid), chunk)
        self._prune(gids, owners, chunk)
        self._records.pop(iid, None)
        self._dirty_records.add(iid)
        del self._digests[dkey]
        self._dirty_names.add(K.DIGEST + dkey.encode())
        self._digest_by_id[iid] = None
        self._free.add(iid)
        return True

    # -- resolving purls to their members -------------------------------------------------
    def _resolve(
        self,
        purls: Sequence[str],
        pks: Sequence[str],
        chunk: int,
        *,
        validate: bool,
        create: bool = True,
    ) -> list[Member]:
        """Every purl's member in the chunk. Purls new to the chunk are validated (when
        ``validate``) before any is created; with ``create=False`` only validates."""
        fc = self._flat_c.get(chunk)
        if fc is None:
            fc = self._flat_c[chunk] = {}
        found: list[Member | None] = list(map(fc.get, purls))
        if None not in found:
            return found  # type: ignore[return-value]  # no None in found (checked above)
        missing = list(compress(range(len(found)), map(_is_none, found)))
        mpks = [pks[i] for i in missing]
        groups = self._groups
        if self.source is not None and len(groups) < len(self._gids):
            gids = self._gids  # known products not in memory: one multi-get
            cold = [pk for pk in dict.fromkeys(mpks) if pk in gids and pk not in groups]
            if cold:
                self._load_groups(cold)
        seen: dict[str, Group | None] = {}
        new: list[tuple[int, str]] = []
        for i, pk in zip(missing, mpks, strict=True):
            if pk not in seen:  # open the chunk of every known product involved
                g = seen[pk] = groups.get(pk)
                if g is not None and chunk not in g.open:
                    self._open(g, chunk)
            m = fc.get(purls[i])
            if m is None:
                new.append((i, pk))
            else:
                found[i] = m
        if validate:
            for i, pk in new:
                check_component(purls[i], pk)
        if not create:
            return []
        made: dict[str, tuple[Group, dict[str, Member]]] = {}  # pk -> group, its members
        for i, pk in new:
            purl = purls[i]
            m = fc.get(purl)  # a purl listed twice in one image
            if m is None:
                got = made.get(pk)
                if got is None:
                    g = seen[pk] or self._new_group(pk)
                    got = made[pk] = (g, self._open(g, chunk)[0])
                # suffixes ("@1.2.3", "@1.0?arch=amd64") repeat across products: one copy
                m = got[1][intern(purl[len(pk) :])] = fc[purl] = _new_member(got[0].gid)
                got[0].open_members += 1
            found[i] = m
        return found  # type: ignore[return-value]  # every None slot was filled in the loop

    def _resolve_used(
        self, purls: Sequence[str], used: Sequence[bool], chunk: int, members: list[Member]
    ) -> list[Member]:
        """The used-by-entrypoint members of the used purls (their groups are open)."""
        fu = self._flat_u.get(chunk)
        if fu is None:
            fu = self._flat_u[chunk] = {}
        upurls = list(compress(purls, used))
        found: list[Member | None] = list(map(fu.get, upurls))
        if None not in found:
            return found  # type: ignore[return-value]  # no None in found (checked above)
        umembers = list(compress(members, used))
        for j in compress(range(len(found)), map(_is_none, found)):
            purl = upurls[j]
            m = fu.get(purl)  # a purl listed twice
            if m is None:
                gid = umembers[j][0]
                g = self._groups[self._pk_by_gid[gid]]  # type: ignore[index]  # a member's gid is live, so its product key is not None
                m = self._open(g, chunk)[2][intern(purl[len(g.pk) :])] = _new_member(gid)
                g.open_members += 1
                fu[purl] = m
            found[j] = m
        return found  # type: ignore[return-value]  # every None slot was filled in the loop

    # -- stripping and pruning (re-index, removal) -----------------------------------------
    def _strip(self, iid: int, old: ImageRecord, chunk: int) -> tuple[list[int], list[bytes]]:
        """Take ``iid`` out of every bitmap its record names; empties are pruned later."""
        self._settle()
        groups, by_gid = self._groups, self._pk_by_gid
        if self.source is not None:
            cold = [pk for gid in old.gids if (pk := by_gid[gid]) not in groups]
            if cold:
                self._load_groups(cold)  # type: ignore[arg-type]  # an indexed image's gids are live, so their product keys are not None
        for gid in old.gids:
            g = groups[by_gid[gid]]  # type: ignore[index]  # as above
            self._stale(g)
            for members in self._open(g, chunk):
                for m in members.values():
                    _discard(m, iid)
        _merge(self._dirty_chunks, chunk, K.bitmap(old.gids))
        owners = K.owner_keys(
            old.tenant, old.registry, old.repo, old.namespace, old.tags, old.labels, old.usage_known
        )
        for key in owners:
            bm = self._owner(key)
            if bm is not None:
                bm.discard(iid)
                self._dirty_owners.add(key)
        return old.gids, owners

    def _prune(self, gids: list[int], owners: list[bytes], chunk: int) -> None:
        """Drop what a strip emptied and the re-add did not refill."""
        self._settle()
        fc, fu = self._flat_c.get(chunk, {}), self._flat_u.get(chunk, {})
        for gid in gids:
            pk = self._pk_by_gid[gid]
            if pk is None:
                continue
            g = self._groups.get(pk)
            if g is None or g.gid != gid:
                continue
            if not self._product(g, 0):
                self._delete_group(g)
                continue
            for members, flat in zip(g.open[chunk], (fc, fc, fu, fu), strict=True):
                empty = [s for s, m in members.items() if member_empty(m)]
                for s in empty:
                    del members[s]
                    flat.pop(pk + s, None)
                g.open_members -= len(empty)
        for key in owners:
            bm = self._owners.get(key)
            if bm is not None and not bm:
                self._owner_delete(key)

    def _delete_group(self, g: Group) -> None:
        self._dead.extend(K.group_key(g.gid, c) for c in g.chunk_numbers())
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
