"""The schedule of docs/api.md, as written there, is planned by a Feedser export that touches
an image of its selection (and the demo's schedule beside it too) — pure: the gateway's own
request type, the planner's folds and planning, an in-memory ImpactIndex."""

from __future__ import annotations

import re
from pathlib import Path

import msgspec

from streamproc.events import payloads as p
from streamproc.gateway.api.models import ScheduleCreate
from streamproc.impact.index import ImpactIndex
from streamproc.planner.model import Cause, StaticSource
from streamproc.planner.plan import plan_run
from streamproc.planner.settings import PlannerSettings
from streamproc.sbom.image import build_image
from tests.planner.test_plan import changes
from tests.planner.util import Log, created, event

API_MD = Path(__file__).resolve().parents[2] / "docs" / "api.md"
SETUPTOOLS = "pkg:pypi/setuptools"


def documented_schedule() -> ScheduleCreate:
    """The body of the ``POST /schedules`` example, as the gateway decodes it."""
    text = API_MD.read_text()
    found = re.search(r"schedules\?wait=true\".*?-d '(\{.*?\})'", text, re.S)
    assert found, "the POST /schedules example of docs/api.md"
    return msgspec.json.decode(found.group(1).encode(), type=ScheduleCreate)


def image(digest: str, namespace: str) -> object:
    return build_image(
        tenant="demo", digest=digest, purls=[f"{SETUPTOOLS}@65.5.0"], used=[True],
        registry="registry.local", repo="shop/web", namespace=namespace,
    )  # fmt: skip


def test_the_documented_schedule_is_planned_by_a_feedser_export() -> None:
    body = documented_schedule()
    assert body.subscriptions == ["feedser", "vexer"]
    fields = {f: getattr(body, f) for f in body.__struct_fields__ if f not in ("id", "tenant_id")}
    log = Log()
    log.fold(
        event("schedule.created", p.ScheduleCreated(schedule_id=str(body.id), **fields), "demo"),
        event("schedule.created", created("demo-nightly", subscriptions=["feedser"]), "demo"),
    )
    index = ImpactIndex()
    index.index_image(image("sha256:" + "a" * 64, "prod"))  # type: ignore[arg-type]
    index.index_image(image("sha256:" + "b" * 64, "demo"))  # type: ignore[arg-type]
    cause = Cause(run_id="r1", tenant="demo", trigger="feedser", at_ms=0,
                  changes=changes([SETUPTOOLS]))  # fmt: skip
    plan = plan_run(cause, log.state.schedules.for_tenant("demo"), StaticSource(index), {},
                    PlannerSettings(debounce_s=0))  # fmt: skip
    assert plan.schedule_ids == ["demo-nightly", "nightly-prod"]
    # demo-nightly (every image) finds both, nightly-prod only the image in namespace prod
    assert plan.stats.candidates == 3 and plan.stats.deduped == 2
