"""Inclusion proofs from a real state directory, checked with nothing but the public key."""

from __future__ import annotations

from collections.abc import Iterator

import msgspec
import pytest

from streamproc.audit import layout
from streamproc.audit.proofs import ProofError, decode_proof, encode_proof, prove, verify_proof
from streamproc.state.store import RocksStore
from tests.audit.conftest import Pristine
from tests.audit.helpers import keyring, signer


@pytest.fixture
def store(pristine: Pristine) -> Iterator[RocksStore]:
    s = RocksStore(pristine.path, read_only=True)
    yield s
    s.close()


def test_every_attested_entry_has_a_proof(store: RocksStore) -> None:
    ring = keyring()
    for e in layout.iter_entries(store, "acme"):
        if e.position >= 200:
            with pytest.raises(ProofError) as err:
                prove(store, "acme", e.chain_link)
            assert err.value.not_yet
            continue
        proof = decode_proof(encode_proof(prove(store, "acme", e.chain_link)))
        assert (proof.index, proof.batch_size) == (e.position % 50, 50)
        check = verify_proof(proof, ring)
        assert check.ok, check.reason
        assert check.key_id == signer().key_id


def test_a_proof_binds_the_entry_contents(store: RocksStore) -> None:
    link = layout.entry_at(store, "acme", 73)
    assert link is not None
    proof = prove(store, "acme", link.chain_link)
    ring = keyring()
    replace = msgspec.structs.replace
    cases = {
        "payload": replace(proof, entry=replace(proof.entry, payload=proof.entry.payload + " ")),
        "action": replace(proof, entry=replace(proof.entry, action="COMPLETE")),
        "index": replace(proof, index=proof.index + 1),
        "path": replace(proof, audit_path=proof.audit_path[::-1]),
        "tenant": replace(proof, tenant="beta"),
    }
    for what, bad in cases.items():
        check = verify_proof(bad, ring)
        assert not check.ok, what
    with pytest.raises(ProofError) as err:
        prove(store, "acme", "zz")
    assert not err.value.not_yet
