"""DSSE (Dead Simple Signing Envelope) with Ed25519 via PyNaCl.

DSSE signs PAE(payloadType, body) rather than the body alone, so a signature can never be
replayed under a different payload type; the envelope is plain JSON any DSSE tool can read.
The keyid in a signature is only an unauthenticated hint: verification always rests on the
public keys in a caller-supplied Keyring, which can hold old keys during rotation.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import msgspec
from nacl.exceptions import BadSignatureError
from nacl.signing import SigningKey, VerifyKey

__all__ = [
    "DsseError",
    "Envelope",
    "Keyring",
    "Signature",
    "Signer",
    "VerifiedPayload",
    "decode_envelope",
    "encode_envelope",
    "pae",
    "public_key_b64",
    "signing_key_from_seed",
    "verify",
    "verify_key_from_b64",
]

ED25519_SEED_SIZE = 32
ED25519_SIGNATURE_SIZE = 64
MAX_SIGNATURES = 16
"""Cap on signatures per envelope, bounding trial verifications (signatures times keys)."""

_HEX_SEED = re.compile(r"[0-9a-fA-F]{64}")


class DsseError(Exception):
    """An envelope is malformed or no signature on it verifies against the keyring."""


class Signature(msgspec.Struct, frozen=True):
    """One DSSE signature; `keyid` is an unauthenticated hint, `sig` standard base64."""

    keyid: str
    sig: str


class Envelope(msgspec.Struct, frozen=True):
    """DSSE JSON envelope; field names follow the DSSE spec (hence camelCase)."""

    payloadType: str
    payload: str
    signatures: list[Signature]


@dataclass(frozen=True, slots=True)
class VerifiedPayload:
    """What a successful verification yields; key_id names the key that actually verified."""

    payload_type: str
    body: bytes
    key_id: str


def pae(payload_type: str, body: bytes) -> bytes:
    """DSSEv1 Pre-Authentication Encoding: what is actually signed (lengths in UTF-8 bytes)."""
    type_bytes = payload_type.encode("utf-8")
    return b"DSSEv1 %d %b %d %b" % (len(type_bytes), type_bytes, len(body), body)


def _b64encode(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _b64decode(text: str, what: str) -> bytes:
    """Strict standard base64 (alphabet and padding checked) so garbage is rejected, not skipped."""
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError, ValueError) as exc:
        raise DsseError(f"{what} is not valid standard base64: {exc}") from None


def signing_key_from_seed(seed: str) -> SigningKey:
    """Load an Ed25519 key from its 32-byte seed as 64 hex chars or standard base64.

    Surrounding whitespace is ignored (seeds usually come from files or env vars). Exactly 64
    hex digits is read as hex; a base64 seed is 44 chars, so the two forms cannot collide.
    """
    text = seed.strip()
    if _HEX_SEED.fullmatch(text):
        raw = bytes.fromhex(text)
    else:
        try:
            raw = base64.b64decode(text.encode("ascii"), validate=True)
        except (binascii.Error, UnicodeEncodeError, ValueError):
            raise ValueError("seed is neither 64 hex digits nor standard base64") from None
    if len(raw) != ED25519_SEED_SIZE:
        raise ValueError(f"Ed25519 seed must be {ED25519_SEED_SIZE} bytes, got {len(raw)}")
    return SigningKey(raw)


def public_key_b64(key: SigningKey | VerifyKey) -> str:
    """Standard-base64 public key, the form operators publish and put in a Keyring."""
    verify_key = key.verify_key if isinstance(key, SigningKey) else key
    return _b64encode(bytes(verify_key))


def verify_key_from_b64(text: str) -> VerifyKey:
    """Parse a standard-base64 32-byte Ed25519 public key."""
    try:
        raw = base64.b64decode(text.strip().encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError, ValueError):
        raise ValueError("public key is not valid standard base64") from None
    if len(raw) != ED25519_SEED_SIZE:
        raise ValueError(f"Ed25519 public key must be 32 bytes, got {len(raw)}")
    return VerifyKey(raw)


@dataclass(frozen=True, slots=True)
class Signer:
    """Signs DSSE envelopes with one Ed25519 key, labelling signatures with `key_id`."""

    key_id: str
    signing_key: SigningKey

    @property
    def public_key_b64(self) -> str:
        return public_key_b64(self.signing_key)

    def sign(self, payload_type: str, body: bytes) -> Envelope:
        """Envelope over `body`; the signature covers PAE(payload_type, body)."""
        sig = self.signing_key.sign(pae(payload_type, body)).signature
        return Envelope(
            payloadType=payload_type,
            payload=_b64encode(body),
            signatures=[Signature(keyid=self.key_id, sig=_b64encode(sig))],
        )


class Keyring:
    """Trusted public keys by key id; keep retired keys here so old envelopes still verify."""

    __slots__ = ("_keys",)

    def __init__(self, keys: Mapping[str, VerifyKey] | None = None) -> None:
        self._keys: dict[str, VerifyKey] = {}
        for key_id, key in (keys or {}).items():
            self.add(key_id, key)

    @classmethod
    def from_b64(cls, keys: Mapping[str, str]) -> Keyring:
        """Build from {key_id: base64 public key}, the shape config files use."""
        return cls({key_id: verify_key_from_b64(text) for key_id, text in keys.items()})

    def add(self, key_id: str, key: VerifyKey) -> None:
        """Trust `key` under `key_id`; re-binding an id to a different key is refused."""
        existing = self._keys.get(key_id)
        if existing is not None and bytes(existing) != bytes(key):
            raise ValueError(f"key id {key_id!r} is already bound to a different key")
        self._keys[key_id] = key

    def remove(self, key_id: str) -> None:
        """Stop trusting a key (e.g. after it is compromised, not merely rotated)."""
        self._keys.pop(key_id, None)

    def get(self, key_id: str) -> VerifyKey | None:
        return self._keys.get(key_id)

    def __contains__(self, key_id: object) -> bool:
        return key_id in self._keys

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)

    def items(self) -> list[tuple[str, VerifyKey]]:
        return list(self._keys.items())


def _verifies(key: VerifyKey, message: bytes, sig: bytes) -> bool:
    try:
        key.verify(message, sig)
    except BadSignatureError:
        return False
    return True


def verify(
    envelope: Envelope, keyring: Keyring, *, expected_payload_type: str | None = None
) -> VerifiedPayload:
    """Return the payload if some signature verifies under some keyring key, else raise.

    The hinted key is tried first, then every other key, so a wrong or spoofed keyid can
    neither cause acceptance nor block a genuine signature; the reported key_id is the id of
    the key that verified, never the claimed one. Any malformed signature rejects the envelope.
    """
    if expected_payload_type is not None and envelope.payloadType != expected_payload_type:
        raise DsseError(
            f"payload type is {envelope.payloadType!r}, expected {expected_payload_type!r}"
        )
    if not envelope.signatures:
        raise DsseError("envelope has no signatures")
    if len(envelope.signatures) > MAX_SIGNATURES:
        raise DsseError(
            f"envelope has {len(envelope.signatures)} signatures (max {MAX_SIGNATURES})"
        )
    if len(keyring) == 0:
        raise DsseError("keyring is empty: no key to verify against")
    body = _b64decode(envelope.payload, "payload")
    sigs: list[tuple[str, bytes]] = []
    for i, signature in enumerate(envelope.signatures):
        raw = _b64decode(signature.sig, f"signature {i}")
        if len(raw) != ED25519_SIGNATURE_SIZE:
            raise DsseError(f"signature {i} is {len(raw)} bytes, Ed25519 needs 64")
        sigs.append((signature.keyid, raw))
    message = pae(envelope.payloadType, body)
    for hint, raw in sigs:
        hinted = keyring.get(hint)
        if hinted is not None and _verifies(hinted, message, raw):
            return VerifiedPayload(envelope.payloadType, body, hint)
        for key_id, key in keyring.items():
            if key_id != hint and _verifies(key, message, raw):
                return VerifiedPayload(envelope.payloadType, body, key_id)
    hints = ", ".join(repr(h) for h, _ in sigs)
    raise DsseError(
        f"none of {len(sigs)} signature(s) (keyid hints {hints}) verifies under any of the "
        f"{len(keyring)} trusted key(s)"
    )


def encode_envelope(envelope: Envelope) -> bytes:
    """Compact JSON for storage or transport."""
    return msgspec.json.encode(envelope)


def decode_envelope(data: bytes | str) -> Envelope:
    """Parse envelope JSON, turning schema errors into DsseError (signatures are not checked)."""
    try:
        return msgspec.json.decode(data, type=Envelope)
    except msgspec.DecodeError as exc:
        raise DsseError(f"malformed DSSE envelope: {exc}") from None
