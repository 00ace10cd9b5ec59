"""The runner's completion reactor on a real nats-server: a run whose segments are all
accounted for is finished once (``run.completed``), and the reactor forgets it once its
completion is folded — it keeps nothing per run that ever completed."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from streamproc.bus.publisher import Publisher
from streamproc.config import Settings
from streamproc.events import payloads as p
from streamproc.events.envelope import encode, new_event
from streamproc.hlc import HybridLogicalClock
from streamproc.runner.completion import Completer
from streamproc.runner.records import Reader
from streamproc.runner.state import RunnerState
from streamproc.runtime.projection import Folder
from streamproc.runtime.reactor import RoleContext
from streamproc.state import keys
from streamproc.state.store import MemoryStore
from tests.runner.harness import events


def harness(
    publisher: Publisher, prefix: str, tmp_path: Path
) -> tuple[Callable[[str, p.Payload], None], RoleContext, MemoryStore]:
    store = MemoryStore()
    folder = Folder(store, [RunnerState()])
    seq = 0

    def fold(kind: str, payload: p.Payload, tenant: str = "acme") -> None:
        nonlocal seq
        seq += 1
        e = new_event(kind, tenant, payload, f"{1000 + seq}:0:n", event_id=f"e{seq}")
        folder.apply([(seq, "x", encode(e))], keys.Checkpoint("S", "epoch", seq))

    clock = HybridLogicalClock("runner-t", state_file=tmp_path / "hlc.json")
    ctx = RoleContext(
        role="runner",
        settings=Settings(prefix=prefix),
        store=store,
        publisher=publisher,
        clock=clock,
        applied=lambda: seq,
        wait_for=lambda _s, _t: None,  # type: ignore[arg-type,return-value]
        lag=lambda: 0,
    )
    return fold, ctx, store


async def test_finished_runs_are_forgotten_once_their_completion_is_folded(
    publisher: Publisher, prefix: str, stream_names: tuple[str, str, str], tmp_path: Path
) -> None:
    fold, ctx, store = harness(publisher, prefix, tmp_path)
    completer = Completer()
    runs = [f"run-{i}" for i in range(5)]
    for run_id in runs:  # planned with nothing to scan: accounted for at once
        fold("run.requested", p.RunRequested(run_id=run_id, trigger="manual"))
        fold("run.planned", p.RunPlanned(run_id=run_id, trigger="manual"))
    assert await completer.check(ctx) == 5
    assert await completer.check(ctx) == 0, "sent once (until its retry interval)"
    done = await events(publisher.nc, stream_names[0], "run.completed")
    assert sorted(e.payload.run_id for e in done) == runs
    for e in done:  # the runner folds its own completions
        fold("run.completed", e.payload)
    assert Reader(store).open_runs() == []
    assert await completer.check(ctx) == 0
    assert completer._sent == {}, "nothing kept for runs that completed"


async def test_a_run_cancelled_before_its_plan_ends_cancelled(
    publisher: Publisher, prefix: str, stream_names: tuple[str, str, str], tmp_path: Path
) -> None:
    """The planner records an empty plan for a run cancelled before it was planned: the run
    ends ``cancelled``, not ``completed``."""
    fold, ctx, _ = harness(publisher, prefix, tmp_path)
    fold("run.requested", p.RunRequested(run_id="c", trigger="manual"))
    fold("run.cancel_requested", p.RunCancelRequested(run_id="c", reason="not now"))
    fold("run.planned", p.RunPlanned(run_id="c", trigger="manual"))
    assert await Completer().check(ctx) == 1
    (done,) = await events(publisher.nc, stream_names[0], "run.cancelled")
    assert done.payload.run_id == "c" and done.payload.reason == "not now"
    assert await events(publisher.nc, stream_names[0], "run.completed") == []
