"""DSSE tests: PAE bytes, roundtrip, tampering, untrusted keys, rotation, keyid spoofing."""

from __future__ import annotations

import base64

import pytest
from nacl.signing import SigningKey

from streamproc.audit.dsse import (
    DsseError,
    Envelope,
    Keyring,
    Signature,
    Signer,
    decode_envelope,
    encode_envelope,
    pae,
    public_key_b64,
    signing_key_from_seed,
    verify,
    verify_key_from_b64,
)

PTYPE = "application/vnd.streamproc.test+json"
BODY = b'{"hello":"world"}'

# RFC 8032 §7.1 TEST 1: seed and the public key it must derive.
RFC8032_SEED = "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60"
RFC8032_PUB = "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a"


def _signer(key_id: str, seed_byte: int) -> Signer:
    return Signer(key_id, SigningKey(bytes([seed_byte]) * 32))


def _ring(*signers: Signer) -> Keyring:
    return Keyring({s.key_id: s.signing_key.verify_key for s in signers})


def _with_payload(env: Envelope, body: bytes) -> Envelope:
    return Envelope(env.payloadType, base64.b64encode(body).decode(), env.signatures)


def test_pae_byte_exact() -> None:
    assert (
        pae("http://example.com/HelloWorld", b"hello world")
        == b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"
    )
    assert pae("", b"") == b"DSSEv1 0  0 "
    # Lengths count UTF-8 bytes, not characters.
    assert pae("t\u00e9", b"\xff") == b"DSSEv1 3 t\xc3\xa9 1 \xff"


def test_seed_loading_hex_and_base64_agree_with_rfc8032() -> None:
    raw = bytes.fromhex(RFC8032_SEED)
    from_hex = signing_key_from_seed(RFC8032_SEED)
    from_b64 = signing_key_from_seed(base64.b64encode(raw).decode() + "\n")
    assert bytes(from_hex) == bytes(from_b64) == raw
    pub = public_key_b64(from_hex)
    assert base64.b64decode(pub) == bytes.fromhex(RFC8032_PUB)
    assert public_key_b64(from_hex.verify_key) == pub
    assert bytes(verify_key_from_b64(pub)) == bytes.fromhex(RFC8032_PUB)


@pytest.mark.parametrize("bad", ["", "zz" * 32, "00" * 31, base64.b64encode(b"x" * 31).decode()])
def test_seed_loading_rejects_bad_input(bad: str) -> None:
    with pytest.raises(ValueError):
        signing_key_from_seed(bad)


def test_verify_key_from_b64_rejects_bad_input() -> None:
    with pytest.raises(ValueError):
        verify_key_from_b64("not base64!")
    with pytest.raises(ValueError):
        verify_key_from_b64(base64.b64encode(b"x" * 31).decode())


def test_sign_verify_roundtrip_through_json() -> None:
    signer = _signer("k1", 1)
    env = signer.sign(PTYPE, BODY)
    assert env.payloadType == PTYPE
    assert base64.b64decode(env.payload) == BODY
    assert env.signatures[0].keyid == "k1"
    wire = encode_envelope(env)
    assert b'"payloadType"' in wire
    result = verify(decode_envelope(wire), _ring(signer), expected_payload_type=PTYPE)
    assert (result.payload_type, result.body, result.key_id) == (PTYPE, BODY, "k1")


def test_flipped_body_byte_fails() -> None:
    signer = _signer("k1", 1)
    env = signer.sign(PTYPE, BODY)
    for i in range(len(BODY)):
        tampered = bytearray(BODY)
        tampered[i] ^= 0x01
        with pytest.raises(DsseError, match="verifies"):
            verify(_with_payload(env, bytes(tampered)), _ring(signer))


def test_changed_payload_type_fails() -> None:
    signer = _signer("k1", 1)
    env = signer.sign(PTYPE, BODY)
    retyped = Envelope("text/plain", env.payload, env.signatures)
    with pytest.raises(DsseError):
        verify(retyped, _ring(signer))
    with pytest.raises(DsseError, match="expected"):
        verify(env, _ring(signer), expected_payload_type="text/plain")


def test_untrusted_key_fails() -> None:
    trusted, stranger = _signer("k1", 1), _signer("k2", 2)
    with pytest.raises(DsseError, match="none of 1 signature"):
        verify(stranger.sign(PTYPE, BODY), _ring(trusted))


def test_rotation_old_key_kept_then_removed() -> None:
    old, new = _signer("2024", 1), _signer("2025", 2)
    old_env = old.sign(PTYPE, BODY)
    ring = _ring(old, new)
    assert verify(old_env, ring).key_id == "2024"
    assert verify(new.sign(PTYPE, BODY), ring).key_id == "2025"
    ring.remove("2024")
    with pytest.raises(DsseError):
        verify(old_env, ring)
    assert verify(new.sign(PTYPE, BODY), ring).key_id == "2025"


def test_keyid_spoofing_with_untrusted_key_fails() -> None:
    trusted = _signer("trusted", 1)
    attacker = Signer("trusted", SigningKey(bytes([9]) * 32))  # claims the trusted id
    with pytest.raises(DsseError):
        verify(attacker.sign(PTYPE, BODY), _ring(trusted))


def test_keyid_is_only_a_hint() -> None:
    a, b = _signer("a", 1), _signer("b", 2)
    mislabelled = Signer("a", b.signing_key).sign(PTYPE, BODY)  # signed by b, claims a
    assert verify(mislabelled, _ring(a, b)).key_id == "b"  # reports the key that verified
    unknown_hint = Signer("nobody", a.signing_key).sign(PTYPE, BODY)
    assert verify(unknown_hint, _ring(a, b)).key_id == "a"


def test_any_valid_signature_among_several_suffices() -> None:
    good, bad = _signer("good", 1), _signer("bad", 2)
    env = good.sign(PTYPE, BODY)
    stray = bad.sign(PTYPE, BODY).signatures[0]
    both = Envelope(env.payloadType, env.payload, [stray, *env.signatures])
    assert verify(both, _ring(good)).key_id == "good"


def test_rejects_structurally_bad_envelopes() -> None:
    signer = _signer("k1", 1)
    ring = _ring(signer)
    env = signer.sign(PTYPE, BODY)
    sig = env.signatures[0]
    with pytest.raises(DsseError, match="no signatures"):
        verify(Envelope(PTYPE, env.payload, []), ring)
    with pytest.raises(DsseError, match="payload is not valid"):
        verify(Envelope(PTYPE, env.payload + "!", env.signatures), ring)
    with pytest.raises(DsseError, match="payload is not valid"):
        verify(Envelope(PTYPE, env.payload.rstrip("="), env.signatures), ring)
    with pytest.raises(DsseError, match="signature 0 is not valid"):
        verify(Envelope(PTYPE, env.payload, [Signature("k1", "%%%")]), ring)
    short = base64.b64encode(base64.b64decode(sig.sig)[:63]).decode()
    with pytest.raises(DsseError, match="63 bytes"):
        verify(Envelope(PTYPE, env.payload, [Signature("k1", short)]), ring)
    with pytest.raises(DsseError, match="max"):
        verify(Envelope(PTYPE, env.payload, [sig] * 17), ring)
    with pytest.raises(DsseError, match="keyring is empty"):
        verify(env, Keyring())


def test_decode_envelope_rejects_malformed_json() -> None:
    with pytest.raises(DsseError):
        decode_envelope(b"{not json")
    with pytest.raises(DsseError):
        decode_envelope(b'{"payloadType": "x", "payload": "", "signatures": [{"sig": 1}]}')


def test_keyring_refuses_rebinding_an_id() -> None:
    a, b = _signer("a", 1), _signer("b", 2)
    ring = _ring(a)
    ring.add("a", a.signing_key.verify_key)  # idempotent
    with pytest.raises(ValueError):
        ring.add("a", b.signing_key.verify_key)
    assert "a" in ring and len(ring) == 1 and list(ring) == ["a"]
    assert Keyring.from_b64({"a": a.public_key_b64}).get("a") == a.signing_key.verify_key
