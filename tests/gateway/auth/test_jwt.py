"""JOSE parsing against hostile input: strict base64url (L3) and bounded JSON depth (L1),
for the header, the payload and a DPoP proof's ``jwk``; and ``typ`` values (L9)."""

from __future__ import annotations

import json

import pytest
from nacl.signing import SigningKey

from streamproc.gateway.auth import jwt

KEY = SigningKey(b"\x07" * 32)
ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"


def raw_jws(header_json: str, payload_json: str, key: SigningKey = KEY) -> str:
    """A compact JWS over exactly these JSON texts (``jwt.sign`` would re-encode them)."""
    h = jwt.b64url(header_json.encode())
    p = jwt.b64url(payload_json.encode())
    return f"{h}.{p}.{jwt.b64url(key.sign(f'{h}.{p}'.encode()).signature)}"


def non_canonical(segment: str) -> str:
    """The same bytes with the unused low bits of the last character set: lenient decoders
    accept it, and it is a different string (a different token) for every cache."""
    last = ALPHABET.index(segment[-1])
    spare = {2: 0b1111, 3: 0b11}[len(segment) % 4]
    assert last & spare == 0, "a canonical encoding leaves the spare bits zero"
    return segment[:-1] + ALPHABET[last | 1]


def test_b64url_accepts_only_canonical_unpadded_base64url() -> None:
    assert jwt.b64url_decode("") == b""
    assert jwt.b64url_decode("AQID") == b"\x01\x02\x03"
    assert jwt.b64url_decode("_-8") == b"\xff\xef"
    for bad in (
        "AQID$$$$",  # junk a lenient decoder skips
        "AQ ID",
        "AQID\n",
        "AQ==",  # padding
        "A+B/",  # the base64 (not url) alphabet
        "AQIDB",  # a length no encoding has (4n+1)
        non_canonical("AQI"),  # spare bits set
        non_canonical("AQ"),
        "AQ\u00b2D",
    ):
        with pytest.raises(jwt.JwtError, match="base64url"):
            jwt.b64url_decode(bad)


def test_a_token_with_junk_or_a_non_canonical_segment_does_not_parse() -> None:
    good = jwt.sign({"a": 1}, KEY, {"kid": "k"})
    assert jwt.verify(jwt.parse(good), KEY.verify_key)
    head, body, sig = good.split(".")
    for bad in (
        good + "$$$$",
        f"{head}.{body}.{non_canonical(sig)}",
        f"{head}.{body}$.{sig}",
        f"{non_canonical(head)}.{body}.{sig}" if len(head) % 4 else f"{head}=.{body}.{sig}",
    ):
        with pytest.raises(jwt.JwtError, match="base64url"):
            jwt.parse(bad)


@pytest.mark.parametrize("where", ["header", "payload", "jwk"])
def test_deeply_nested_json_is_a_clear_error_not_a_recursion_error(where: str) -> None:
    deep = "[" * 2000 + "]" * 2000  # msgspec recurses past its limit at ~1000
    header, payload = '{"alg":"EdDSA","kid":"k"}', '{"a":1}'
    if where == "header":
        header = '{"alg":"EdDSA","kid":"k","x":' + deep + "}"
    elif where == "payload":
        payload = '{"a":' + deep + "}"
    else:
        jwk = json.dumps(jwt.okp_jwk(KEY.verify_key))[:-1] + ',"ext":' + deep + "}"
        header = '{"alg":"EdDSA","typ":"dpop+jwt","jwk":' + jwk + "}"
    with pytest.raises(jwt.JwtError, match=f"nested deeper than {jwt.MAX_JSON_DEPTH}"):
        jwt.parse(raw_jws(header, payload))


def test_the_depth_bound_counts_structure_not_brackets_in_strings() -> None:
    nested = '{"a":{"b":{"c":[1,[2]]}}}'  # depth 5: well inside the bound
    assert jwt.json_depth(nested.encode()) == 5
    assert jwt.json_depth(b'{"s":"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[\\"{{{{{{{{{"}') == 1
    assert jwt.json_depth(b"[]") == 1 and jwt.json_depth(b"1") == 0
    c = jwt.parse(raw_jws('{"alg":"EdDSA","kid":"k","x":"[[[[[[[[[[[[[[[[[[[[[[[["}', nested))
    assert c.header.kid == "k"
    limit = "[" * jwt.MAX_JSON_DEPTH + "]" * jwt.MAX_JSON_DEPTH
    jwt.parse(raw_jws('{"alg":"EdDSA"}', limit))
    with pytest.raises(jwt.JwtError, match="nested deeper"):
        jwt.parse(raw_jws('{"alg":"EdDSA"}', "[" + limit + "]"))


def test_media_types_compare_as_rfc_7515_says() -> None:
    assert jwt.media_type("at+jwt") == "at+jwt"
    assert jwt.media_type("application/AT+JWT") == "at+jwt"
    assert jwt.media_type("JWT") == "jwt"
    assert jwt.media_type(None) is None
