"""Query parameters and preconditions take ASCII digits only: ``str.isdigit()`` also says
yes to ``²`` or ``٣``, which ``int()`` then refuses or reads (L2)."""

from __future__ import annotations

import pytest
from aiohttp.test_utils import make_mocked_request
from multidict import CIMultiDict

from streamproc.gateway.api.query import ANY, if_match, int_param
from streamproc.problems import ProblemError
from tests.gateway.harness import BASE, Harness, signed_headers, token

NOT_ASCII_DIGITS = ["\u00b2", "1\u00b2", "\u0663", "\uff11", "\u2460", "+1", "-1", " 1", "1_0"]


@pytest.mark.parametrize("raw", NOT_ASCII_DIGITS)
def test_int_param_refuses_everything_but_ascii_digits(raw: str) -> None:
    request = make_mocked_request("GET", "/x", headers={})
    request = request.clone(rel_url=request.rel_url.with_query(limit=raw))
    with pytest.raises(ProblemError) as refused:
        int_param(request, "limit", 50, 1, 500)
    assert (refused.value.status, refused.value.slug) == (400, "invalid-parameter")


@pytest.mark.parametrize("raw", NOT_ASCII_DIGITS)
def test_if_match_refuses_everything_but_ascii_digits(raw: str) -> None:
    request = make_mocked_request("GET", "/x", headers=CIMultiDict({"If-Match": f'"{raw}"'}))
    with pytest.raises(ProblemError) as refused:
        if_match(request)
    assert (refused.value.status, refused.value.slug) == (400, "invalid-precondition")


def test_ascii_digits_still_parse() -> None:
    request = make_mocked_request("GET", "/x?limit=07", headers=CIMultiDict({"If-Match": '"42"'}))
    assert int_param(request, "limit", 50, 1, 500) == 7
    assert if_match(request) == 42
    star = make_mocked_request("GET", "/x", headers=CIMultiDict({"If-Match": "*"}))
    assert if_match(star) == ANY


async def test_superscript_digits_are_400_over_http(gw: Harness) -> None:
    tok = token()
    created = {"id": "s1", "name": "n", "whenCron": "0 2 * * *", "timezone": "UTC"}
    status, _, _ = await gw.call("POST", f"{BASE}/schedules?wait=true", tok=tok, json=created)
    assert status == 201
    for path in (
        f"{BASE}/schedules?limit=%C2%B2",
        f"{BASE}/schedules/s1?next=%C2%B2",
        f"{BASE}/runs?limit=%C2%B2",
    ):
        status, body, _ = await gw.call("GET", path, tok=tok)
        assert status == 400 and body["type"].endswith("invalid-parameter"), (path, body)
    status, body, _ = await gw.call(
        "PATCH",
        f"{BASE}/schedules/s1",
        tok=tok,
        json={"name": "m"},
        headers={"If-Match": '"\u00b2"'},
    )
    assert status == 400 and body["type"].endswith("invalid-precondition"), body


async def test_a_webhook_timestamp_in_superscript_digits_is_401(gw: Harness) -> None:
    body = b'{"exportId":"e-1","changedProductKeys":["pkg:pypi/x"]}'
    for stamp in ("1\u00b2", "\u0661\u0667\u0660\u0660\u0660\u0660\u0660\u0660\u0660\u0660"):
        headers = signed_headers(body, ts=stamp)  # type: ignore[arg-type]
        status, problem, _ = await gw.call(
            "POST", f"{BASE}/events/feedser-export", data=body, headers=headers
        )
        assert status == 401 and "must be Unix seconds" in problem["detail"], problem
