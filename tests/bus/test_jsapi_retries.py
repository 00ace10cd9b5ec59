"""``jsapi.with_retries``: transient API failures (timeouts, no responders) are asked again
within a budget; real refusals are raised at once."""

from __future__ import annotations

import pytest

from streamproc.bus import jsapi


def failing(errors: list[jsapi.JsApiError], result: str = "ok") -> tuple[object, list[int]]:
    calls: list[int] = []

    async def call() -> str:
        calls.append(1)
        if errors:
            raise errors.pop(0)
        return result

    return call, calls


async def test_timeouts_and_no_responders_are_asked_again() -> None:
    call, calls = failing([jsapi.JsApiError(408, 0, "timed out"), jsapi.JsApiError(503, 0, "nr")])
    assert await jsapi.with_retries(call, budget_s=5, pause_s=0.01) == "ok"  # type: ignore[arg-type]
    assert len(calls) == 3


async def test_a_refusal_is_raised_at_once() -> None:
    refusal = jsapi.JsApiError(503, 10023, "insufficient resources")
    call, calls = failing([refusal])
    with pytest.raises(jsapi.JsApiError) as err:
        await jsapi.with_retries(call, budget_s=5, pause_s=0.01)  # type: ignore[arg-type]
    assert err.value is refusal and len(calls) == 1


async def test_the_budget_ends_the_retries() -> None:
    call, calls = failing([jsapi.JsApiError(408, 0, "timed out") for _ in range(100)])
    with pytest.raises(jsapi.JsApiError, match="timed out"):
        await jsapi.with_retries(call, budget_s=0.05, pause_s=0.01)  # type: ignore[arg-type]
    assert 2 <= len(calls) < 100


async def test_a_peer_not_yet_up_in_a_forming_cluster_is_asked_again() -> None:
    offline = jsapi.JsApiError(
        400, jsapi.NO_SUITABLE_PEERS, "no suitable peers for placement, peer offline"
    )
    call, calls = failing([offline])
    assert await jsapi.with_retries(call, budget_s=5, pause_s=0.01) == "ok"  # type: ignore[arg-type]
    assert len(calls) == 2


async def test_too_few_peers_is_raised_at_once() -> None:
    call, calls = failing([jsapi.JsApiError(400, jsapi.NO_SUITABLE_PEERS, "no suitable peers")])
    with pytest.raises(jsapi.JsApiError):
        await jsapi.with_retries(call, budget_s=5, pause_s=0.01)  # type: ignore[arg-type]
    assert len(calls) == 1
