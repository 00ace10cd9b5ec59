"""Merkle tree tests: published CT vectors plus exhaustive comparison with a naive RFC model."""

from __future__ import annotations

import hashlib
import random
from functools import cache

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamproc.audit import merkle
from streamproc.audit.merkle import (
    EMPTY_ROOT,
    MerkleTree,
    consistency_proof,
    inclusion_proof,
    leaf_hash,
    root,
    verify_consistency,
    verify_inclusion,
    verify_inclusion_hash,
)

# Test vectors as published with the Certificate Transparency reference implementations
# (google/certificate-transparency, transparency-dev/merkle proof/verify_test.go).
CT_LEAVES = [
    bytes.fromhex(h)
    for h in (
        "",
        "00",
        "10",
        "2021",
        "3031",
        "40414243",
        "5051525354555657",
        "606162636465666768696a6b6c6d6e6f",
    )
]
CT_ROOTS = [
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",  # size 0
    "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
    "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
    "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
    "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
    "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
    "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
    "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",  # size 8
]
# (0-based leaf index, tree size, audit path)
CT_INCLUSION = [
    (
        0,
        8,
        [
            "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
        ],
    ),
    (
        5,
        8,
        [
            "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
            "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        ],
    ),
    (2, 3, ["fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125"]),
    (
        1,
        5,
        [
            "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
        ],
    ),
]
# (old size, new size, consistency proof)
CT_CONSISTENCY = [
    (1, 1, []),
    (
        1,
        8,
        [
            "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
        ],
    ),
    (
        6,
        8,
        [
            "0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
            "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        ],
    ),
    (
        2,
        5,
        [
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
        ],
    ),
    (
        6,
        7,
        [
            "0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
            "b08693ec2e721597130641e8211e7eedccb4c26413963eee6c1e2ed16ffb1a5f",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        ],
    ),
]


# --- naive reference: a direct transcription of the RFC 6962 §2.1 recursive definitions ---

MAX_SIZE = 300
# Distinct leaves of varied lengths, including the empty leaf.
LEAVES = [b"", *(i.to_bytes(2, "big") * (1 + i % 5) for i in range(1, MAX_SIZE))]


def _largest_pow2_below(n: int) -> int:
    k = 1
    while k * 2 < n:
        k *= 2
    return k


@cache
def ref_mth(start: int, end: int) -> bytes:
    """MTH(LEAVES[start:end]) exactly as RFC 6962 defines it (memoized for speed)."""
    n = end - start
    if n == 0:
        return hashlib.sha256(b"").digest()
    if n == 1:
        return hashlib.sha256(b"\x00" + LEAVES[start]).digest()
    k = _largest_pow2_below(n)
    return hashlib.sha256(b"\x01" + ref_mth(start, start + k) + ref_mth(start + k, end)).digest()


def ref_path(m: int, start: int, end: int) -> list[bytes]:
    """PATH(m, D[start:end]) from RFC 6962 §2.1.1."""
    n = end - start
    if n == 1:
        return []
    k = _largest_pow2_below(n)
    if m < k:
        return [*ref_path(m, start, start + k), ref_mth(start + k, end)]
    return [*ref_path(m - k, start + k, end), ref_mth(start, start + k)]


def ref_subproof(m: int, start: int, end: int, complete: bool) -> list[bytes]:
    """SUBPROOF(m, D[start:end], b) from RFC 6962 §2.1.2."""
    n = end - start
    if m == n:
        return [] if complete else [ref_mth(start, end)]
    k = _largest_pow2_below(n)
    if m <= k:
        return [*ref_subproof(m, start, start + k, complete), ref_mth(start + k, end)]
    return [*ref_subproof(m - k, start + k, end, False), ref_mth(start, start + k)]


def ref_consistency(m: int, n: int) -> list[bytes]:
    return [] if m in (0, n) else ref_subproof(m, 0, n, True)


def _flip(proof: list[bytes], i: int) -> list[bytes]:
    bad = list(proof)
    bad[i] = bytes([bad[i][0] ^ 0x10]) + bad[i][1:]
    return bad


# --- published vectors ---


def test_empty_root_is_sha256_of_empty_string() -> None:
    assert root([]) == EMPTY_ROOT == hashlib.sha256(b"").digest()
    assert MerkleTree([]).root() == EMPTY_ROOT


@pytest.mark.parametrize("size", range(9))
def test_ct_roots(size: int) -> None:
    assert root(CT_LEAVES[:size]).hex() == CT_ROOTS[size]
    assert MerkleTree(CT_LEAVES[:size]).root().hex() == CT_ROOTS[size]


@pytest.mark.parametrize(("index", "size", "path"), CT_INCLUSION)
def test_ct_inclusion_vectors(index: int, size: int, path: list[str]) -> None:
    expected = [bytes.fromhex(h) for h in path]
    leaves = CT_LEAVES[:size]
    assert inclusion_proof(leaves, index) == expected
    assert MerkleTree(leaves).inclusion_proof(index) == expected
    r = bytes.fromhex(CT_ROOTS[size])
    assert verify_inclusion(CT_LEAVES[index], index, size, expected, r)
    # The corruptions the reference implementation probes with.
    bad_cases = [
        (CT_LEAVES[index], index - 1, size, expected, r),
        (CT_LEAVES[index], index + 1, size, expected, r),
        (CT_LEAVES[index], index ^ 2, size, expected, r),
        (CT_LEAVES[index], index, size * 2, expected, r),
        (CT_LEAVES[index], index, size // 2, expected, r),
        (b"WrongLeaf", index, size, expected, r),
        (CT_LEAVES[index], index, size, expected, EMPTY_ROOT),
        (CT_LEAVES[index], index, size, [*expected, b""], r),
        (CT_LEAVES[index], index, size, [*expected, r], r),
        (CT_LEAVES[index], index, size, [r, *expected], r),
        (CT_LEAVES[index], index, size, expected[:-1], r),
        *((CT_LEAVES[index], index, size, _flip(expected, i), r) for i in range(len(expected))),
    ]
    for case in bad_cases:
        assert not verify_inclusion(*case), case


@pytest.mark.parametrize(("m", "n", "path"), CT_CONSISTENCY)
def test_ct_consistency_vectors(m: int, n: int, path: list[str]) -> None:
    expected = [bytes.fromhex(h) for h in path]
    assert consistency_proof(CT_LEAVES[:n], m) == expected
    r1, r2 = bytes.fromhex(CT_ROOTS[m]), bytes.fromhex(CT_ROOTS[n])
    assert verify_consistency(m, n, r1, r2, expected)
    if not expected:
        return
    bad_cases = [
        (m - 1, n, r1, r2, expected),
        (m + 1, n, r1, r2, expected),
        (m ^ 2, n, r1, r2, expected),
        (m, n * 2, r1, r2, expected),
        (m, n // 2, r1, r2, expected),
        (m, n, b"WrongRoot", r2, expected),
        (m, n, r1, b"WrongRoot", expected),
        (m, n, r2, r1, expected),
        (m, n, r1, r2, []),
        (m, n, r1, r2, [*expected, r1]),
        (m, n, r1, r2, [*expected, r2]),
        (m, n, r1, r2, [r1, *expected]),
        (m, n, r1, r2, [expected[0], *expected]),
        (m, n, r1, r2, expected[:-1]),
        *((m, n, r1, r2, _flip(expected, i)) for i in range(len(expected))),
    ]
    for case in bad_cases:
        assert not verify_consistency(*case), case


# --- exhaustive comparison against the naive model ---


def test_roots_match_reference_for_all_sizes() -> None:
    for n in range(MAX_SIZE + 1):
        assert root(LEAVES[:n]) == ref_mth(0, n), n
        assert merkle.root_from_leaf_hashes([leaf_hash(x) for x in LEAVES[:n]]) == ref_mth(0, n)


def test_inclusion_proofs_for_every_index_of_every_size() -> None:
    for n in range(1, MAX_SIZE + 1):
        tree = MerkleTree(LEAVES[:n])
        r = tree.root()
        assert r == ref_mth(0, n)
        for i in range(n):
            proof = tree.inclusion_proof(i)
            assert proof == ref_path(i, 0, n), (n, i)
            assert verify_inclusion(LEAVES[i], i, n, proof, r), (n, i)
            assert not verify_inclusion(b"not a leaf", i, n, proof, r), (n, i)
            if n > 1:
                other = (i + 1) % n
                assert not verify_inclusion(LEAVES[other], i, n, proof, r), (n, i)
                assert not verify_inclusion(LEAVES[i], other, n, proof, r), (n, i)


def test_one_off_inclusion_proof_matches_tree() -> None:
    rng = random.Random(6962)
    for n in (1, 2, 3, 7, 8, 9, 100, 255, 256, 257, MAX_SIZE):
        tree = MerkleTree(LEAVES[:n])
        for i in {0, n - 1, rng.randrange(n)}:
            assert inclusion_proof(LEAVES[:n], i) == tree.inclusion_proof(i)


def _consistency_sizes(n: int, rng: random.Random) -> list[int]:
    if n <= 64:
        return list(range(n + 1))
    picks = {0, 1, 2, 3, n - 2, n - 1, n, n // 2}
    picks |= {1 << b for b in range(n.bit_length()) if 1 << b <= n}
    picks |= {rng.randint(1, n) for _ in range(8)}
    return sorted(picks)


def test_consistency_proofs_against_reference() -> None:
    rng = random.Random(9162)
    for n in range(MAX_SIZE + 1):
        tree = MerkleTree(LEAVES[:n])
        new_root = tree.root()
        for m in _consistency_sizes(n, rng):
            proof = tree.consistency_proof(m)
            assert proof == ref_consistency(m, n), (m, n)
            old_root = ref_mth(0, m)
            assert verify_consistency(m, n, old_root, new_root, proof), (m, n)
            for i in range(len(proof)):
                assert not verify_consistency(m, n, old_root, new_root, _flip(proof, i)), (m, n)
            if 0 < m < n:
                assert not verify_consistency(m, n, new_root, new_root, proof), (m, n)
                assert not verify_consistency(m, n, old_root, old_root, proof), (m, n)
                assert not verify_consistency(m, n, old_root, new_root, proof[:-1]), (m, n)
                assert not verify_consistency(m, n, old_root, new_root, [*proof, new_root])


def test_one_off_consistency_proof_matches_tree() -> None:
    for n, m in ((5, 2), (8, 6), (MAX_SIZE, 123), (MAX_SIZE, 256)):
        assert consistency_proof(LEAVES[:n], m) == ref_consistency(m, n)


# --- edge cases and input validation ---


def test_consistency_edge_cases() -> None:
    r = root(LEAVES[:5])
    assert verify_consistency(0, 0, EMPTY_ROOT, EMPTY_ROOT, [])
    assert verify_consistency(0, 5, EMPTY_ROOT, r, [])
    assert not verify_consistency(0, 5, b"x" * 32, r, [])  # old root must be the empty root
    assert not verify_consistency(0, 5, EMPTY_ROOT, r, [r])
    assert verify_consistency(5, 5, r, r, [])
    assert not verify_consistency(5, 5, r, EMPTY_ROOT, [])
    assert not verify_consistency(5, 5, r, r, [r])
    assert not verify_consistency(6, 5, r, r, [])
    assert not verify_consistency(-1, 5, EMPTY_ROOT, r, [])
    assert not verify_consistency(2, 5, root(LEAVES[:2]), r, [b"short"])


def test_inclusion_rejects_out_of_range_and_malformed() -> None:
    leaves = LEAVES[:7]
    r = root(leaves)
    proof = inclusion_proof(leaves, 3)
    assert not verify_inclusion(leaves[3], -1, 7, proof, r)
    assert not verify_inclusion(leaves[3], 7, 7, proof, r)
    assert not verify_inclusion(leaves[3], 0, 0, [], EMPTY_ROOT)
    assert not verify_inclusion_hash(b"short", 3, 7, proof, r)
    assert not verify_inclusion(leaves[3], 3, 7, [p[:31] for p in proof], r)
    single = root([b"data"])
    assert verify_inclusion(b"data", 0, 1, [], single)
    assert not verify_inclusion(b"data", 0, 1, [single], single)
    with pytest.raises(IndexError):
        inclusion_proof(leaves, 7)
    with pytest.raises(IndexError):
        MerkleTree(leaves).inclusion_proof(-1)
    with pytest.raises(ValueError):
        consistency_proof(leaves, 8)


def test_from_leaf_hashes_equals_from_leaves() -> None:
    tree = MerkleTree.from_leaf_hashes([leaf_hash(x) for x in LEAVES[:77]])
    assert tree.root() == root(LEAVES[:77])
    assert tree.size == 77
    assert tree.inclusion_proof(40) == inclusion_proof(LEAVES[:77], 40)


@given(st.lists(st.binary(max_size=40), max_size=70), st.data())
def test_random_trees_match_reference(leaves: list[bytes], data: st.DataObject) -> None:
    def mth(xs: list[bytes]) -> bytes:
        if not xs:
            return hashlib.sha256(b"").digest()
        if len(xs) == 1:
            return hashlib.sha256(b"\x00" + xs[0]).digest()
        k = _largest_pow2_below(len(xs))
        return hashlib.sha256(b"\x01" + mth(xs[:k]) + mth(xs[k:])).digest()

    r = root(leaves)
    assert r == mth(leaves)
    n = len(leaves)
    m = data.draw(st.integers(0, n))
    assert verify_consistency(m, n, mth(leaves[:m]), r, consistency_proof(leaves, m))
    if n:
        i = data.draw(st.integers(0, n - 1))
        assert verify_inclusion(leaves[i], i, n, inclusion_proof(leaves, i), r)
