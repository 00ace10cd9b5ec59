"""RFC 6962 / RFC 9162 Merkle tree hashing, inclusion and consistency proofs.

We use the Certificate Transparency tree shape (not a "duplicate the odd node" variant) so any
third-party CT/transparency-log verifier can check our batch roots and proofs unmodified.

Trees are built level by level: pairing adjacent nodes and promoting an unpaired last node
unchanged yields exactly the RFC tree (split at the largest power of two below n), because
every left subtree in the RFC recursion is a complete, aligned power-of-two block.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

__all__ = [
    "EMPTY_ROOT",
    "HASH_SIZE",
    "MerkleTree",
    "consistency_proof",
    "inclusion_proof",
    "leaf_hash",
    "node_hash",
    "root",
    "root_from_leaf_hashes",
    "verify_consistency",
    "verify_inclusion",
    "verify_inclusion_hash",
]

_sha256 = hashlib.sha256
HASH_SIZE = 32
EMPTY_ROOT: bytes = _sha256(b"").digest()
"""Root of the empty tree: SHA-256 of the empty string (RFC 6962 §2.1)."""


def leaf_hash(leaf: bytes) -> bytes:
    """SHA-256(0x00 ‖ leaf); the 0x00 domain prefix stops leaves posing as interior nodes."""
    return _sha256(b"\x00" + leaf).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """SHA-256(0x01 ‖ left ‖ right); the 0x01 prefix separates interior nodes from leaves."""
    return _sha256(b"\x01" + left + right).digest()


def _hash_leaves(leaves: Sequence[bytes]) -> list[bytes]:
    sha = _sha256
    return [sha(b"\x00" + leaf).digest() for leaf in leaves]


def _next_level(level: list[bytes]) -> list[bytes]:
    """Pair adjacent nodes; an unpaired last node moves up unchanged (RFC shape, see module)."""
    sha = _sha256
    pairs = iter(level)  # zip(pairs, pairs) yields (0, 1), (2, 3), ...; an odd tail is left over
    parents = [
        sha(b"\x01" + left + right).digest() for left, right in zip(pairs, pairs, strict=False)
    ]
    if len(level) & 1:
        parents.append(level[-1])
    return parents


def root_from_leaf_hashes(hashes: Sequence[bytes]) -> bytes:
    """Root over already-hashed leaves, for callers that keep leaf hashes around."""
    if not hashes:
        return EMPTY_ROOT
    level = list(hashes)
    while len(level) > 1:
        level = _next_level(level)
    return level[0]


def root(leaves: Sequence[bytes]) -> bytes:
    """Merkle Tree Hash MTH(D[n]) of the raw leaves; O(n) time, O(n) transient memory."""
    if not leaves:
        return EMPTY_ROOT
    level = _hash_leaves(leaves)
    while len(level) > 1:
        level = _next_level(level)
    return level[0]


def _largest_power_of_two_below(n: int) -> int:
    """Largest power of two strictly less than n (n >= 2): the RFC 6962 split point."""
    return 1 << ((n - 1).bit_length() - 1)


class MerkleTree:
    """All levels of one tree, so repeated proofs over the same leaves cost O(log n) each."""

    __slots__ = ("_levels", "size")

    def __init__(self, leaves: Sequence[bytes]) -> None:
        self._build(_hash_leaves(leaves))

    @classmethod
    def from_leaf_hashes(cls, hashes: Sequence[bytes]) -> MerkleTree:
        """Build from leaf hashes (e.g. stored ones) without rehashing the leaf data."""
        tree = cls.__new__(cls)
        tree._build(list(hashes))
        return tree

    def _build(self, level: list[bytes]) -> None:
        self.size: int = len(level)
        self._levels: list[list[bytes]] = [level]
        while len(level) > 1:
            level = _next_level(level)
            self._levels.append(level)

    def root(self) -> bytes:
        """MTH of all leaves (EMPTY_ROOT for an empty tree)."""
        return self._levels[-1][0] if self.size else EMPTY_ROOT

    def _subtree(self, start: int, end: int) -> bytes:
        """MTH(D[start:end]) for ranges the RFC recursion produces (aligned or ending at n)."""
        height = (end - start - 1).bit_length()
        width = 1 << height
        if start % width == 0 and min(start + width, self.size) == end:
            return self._levels[height][start >> height]
        return root_from_leaf_hashes(self._levels[0][start:end])  # not reached by our callers

    def inclusion_proof(self, index: int) -> list[bytes]:
        """Audit path PATH(index, D[n]) of RFC 6962 §2.1.1, ordered from the leaf upward."""
        if not 0 <= index < self.size:
            raise IndexError(f"leaf index {index} outside tree of size {self.size}")
        proof: list[bytes] = []
        for level in self._levels[:-1]:
            sibling = index ^ 1
            if sibling < len(level):
                proof.append(level[sibling])
            index >>= 1
        return proof

    def consistency_proof(self, m: int) -> list[bytes]:
        """PROOF(m, D[n]) of RFC 6962 §2.1.2 showing the first m leaves are a prefix."""
        n = self.size
        if not 0 <= m <= n:
            raise ValueError(f"old size {m} must be within 0..{n}")
        if m in (0, n):
            return []
        start, end, rel, complete = 0, n, m, True
        tail: list[bytes] = []  # hashes appended on the way down; emitted innermost-first
        while rel < end - start:
            k = _largest_power_of_two_below(end - start)
            if rel <= k:
                tail.append(self._subtree(start + k, end))
                end = start + k
            else:
                tail.append(self._subtree(start, start + k))
                start += k
                rel -= k
                complete = False
        proof = [] if complete else [self._subtree(start, end)]
        proof.extend(reversed(tail))
        return proof


def inclusion_proof(leaves: Sequence[bytes], index: int) -> list[bytes]:
    """One-off audit path for leaves[index]; use MerkleTree for many proofs on one tree."""
    if not 0 <= index < len(leaves):
        raise IndexError(f"leaf index {index} outside tree of size {len(leaves)}")
    level = _hash_leaves(leaves)
    proof: list[bytes] = []
    while len(level) > 1:
        sibling = index ^ 1
        if sibling < len(level):
            proof.append(level[sibling])
        level = _next_level(level)
        index >>= 1
    return proof


def consistency_proof(leaves: Sequence[bytes], m: int) -> list[bytes]:
    """Consistency proof from size m to len(leaves); empty when m is 0 or len(leaves)."""
    return MerkleTree(leaves).consistency_proof(m)


def _well_formed(proof: Sequence[bytes]) -> bool:
    return all(len(p) == HASH_SIZE for p in proof)


def verify_inclusion(
    leaf: bytes, index: int, size: int, proof: Sequence[bytes], root: bytes
) -> bool:
    """True iff `proof` shows raw `leaf` at `index` in the tree of `size` with `root`."""
    return verify_inclusion_hash(leaf_hash(leaf), index, size, proof, root)


def verify_inclusion_hash(
    hashed_leaf: bytes, index: int, size: int, proof: Sequence[bytes], root: bytes
) -> bool:
    """RFC 9162 §2.1.3.2 with an already-hashed leaf; malformed input just yields False."""
    if not 0 <= index < size or len(hashed_leaf) != HASH_SIZE or not _well_formed(proof):
        return False
    sha = _sha256
    fn, sn, r = index, size - 1, hashed_leaf
    for p in proof:
        if sn == 0:
            return False  # proof longer than the path
        if fn & 1 or fn == sn:
            r = sha(b"\x01" + p + r).digest()
            if not fn & 1:
                while not fn & 1 and fn != 0:
                    fn >>= 1
                    sn >>= 1
        else:
            r = sha(b"\x01" + r + p).digest()
        fn >>= 1
        sn >>= 1
    return sn == 0 and r == root


def verify_consistency(
    m: int, n: int, old_root: bytes, new_root: bytes, proof: Sequence[bytes]
) -> bool:
    """RFC 9162 §2.1.4.2: True iff the size-m tree is a prefix of the size-n tree.

    Edge cases (outside the RFC, which requires 0 < m < n): m == n needs an empty proof and
    equal roots; m == 0 needs an empty proof and old_root == EMPTY_ROOT.
    """
    if not 0 <= m <= n or not _well_formed(proof):
        return False
    if m == 0 and old_root != EMPTY_ROOT:
        return False
    if m == n:
        return not proof and old_root == new_root
    if m == 0:
        return not proof
    if not proof:
        return False
    path = list(proof)
    if m & (m - 1) == 0:  # m is a power of two: the old root is itself a node of the new tree
        path.insert(0, old_root)
    sha = _sha256
    fn, sn = m - 1, n - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            return False  # proof longer than needed
        if fn & 1 or fn == sn:
            fr = sha(b"\x01" + c + fr).digest()
            sr = sha(b"\x01" + c + sr).digest()
            if not fn & 1:
                while not fn & 1 and fn != 0:
                    fn >>= 1
                    sn >>= 1
        else:
            sr = sha(b"\x01" + sr + c).digest()
        fn >>= 1
        sn >>= 1
    return sn == 0 and fr == old_root and sr == new_root
