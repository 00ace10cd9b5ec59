"""Events and a brute-force reference for the impact projection tests."""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass, field
from fnmatch import fnmatchcase

from streamproc.events.envelope import Envelope, new_event
from streamproc.events.payloads import (
    AdvisoryChange,
    Component,
    FeedserExport,
    ImageIndexed,
    ImageRemoved,
)
from streamproc.impact.selector import Selector
from streamproc.sbom.purls import normalize_purl

TYPES = ("deb/debian", "npm", "pypi", "maven/org.example", "golang/github.com/acme")


def digest(i: int) -> str:
    return "sha256:" + hashlib.sha256(str(i).encode()).hexdigest()


def purl(product: int, version: int) -> tuple[str, str]:
    """A canonical (purl, product key) pair; deb purls carry a qualifier."""
    pk = f"pkg:{TYPES[product % len(TYPES)]}/p{product}"
    p = f"{pk}@{version}.{product % 7}"
    return (p + "?arch=amd64" if product % len(TYPES) == 0 else p), pk


_hlc = iter(range(1_700_000_000_000, 1_800_000_000_000))


def indexed(
    tenant: str,
    i: int,
    comps: list[tuple[str, str, bool]],
    *,
    namespace: str | None = None,
    repo: str = "app",
    tags: list[str] | None = None,
    labels: dict[str, str] | None = None,
    usage_known: bool | None = None,
) -> Envelope:
    payload = ImageIndexed(
        digest=digest(i),
        registry="registry.example.com",
        repository=repo,
        namespace=namespace,
        tags=tags or [],
        labels=labels or {},
        components=[Component(purl=p, product_key=k, used=u) for p, k, u in comps],
        usage_known=usage_known,
    )
    return new_event("image.indexed", tenant, payload, f"{next(_hlc)}:0:test")


def removed(tenant: str, i: int) -> Envelope:
    return new_event(
        "image.removed", tenant, ImageRemoved(digest=digest(i)), f"{next(_hlc)}:0:test"
    )


def feedser(export_id: str, rows: dict[str, list[str]]) -> Envelope:
    payload = FeedserExport(
        export_id=export_id,
        advisories=[AdvisoryChange(vuln_id=v, product_keys=ks) for v, ks in rows.items()],
    )
    return new_event("export.feedser", "feeds", payload, f"{next(_hlc)}:0:test")


@dataclass
class Model:
    """What every image currently is: the reference answers come from scanning it."""

    images: dict[tuple[str, str], ImageIndexed] = field(default_factory=dict)
    vulns: dict[str, set[str]] = field(default_factory=dict)

    def apply(self, e: Envelope) -> None:
        p = e.payload
        if isinstance(p, ImageIndexed):
            self.images[(e.tenant, p.digest)] = p
        elif isinstance(p, ImageRemoved):
            self.images.pop((e.tenant, p.digest), None)
        elif isinstance(p, FeedserExport):
            for a in p.advisories:
                self.vulns.setdefault(a.vuln_id, set()).update(a.product_keys)

    def resolve(self, keys: list[str], usage_only: bool, sel: Selector) -> set[str]:
        wanted = [normalize_purl(k) for k in keys]
        out = set()
        for (tenant, d), img in self.images.items():
            if tenant != sel.tenant or not self.in_scope(img, sel):
                continue
            for c in img.components:
                if not self.counts(img, c, usage_only):
                    continue
                if any(
                    (w.purl == w.product_key and c.product_key == w.product_key) or c.purl == w.purl
                    for w in wanted
                ):
                    out.add(d)
                    break
        return out

    @staticmethod
    def counts(img: ImageIndexed, c: Component, usage_only: bool) -> bool:
        """Does the component count for a query? With ``usage_only`` only if used, unless
        the image has no usage data (then all do)."""
        known = img.usage_known
        if known is None:  # events without the flag: known when anything is used
            known = any(x.used for x in img.components)
        return c.used or not usage_only or not known

    @staticmethod
    def in_scope(img: ImageIndexed, sel: Selector) -> bool:
        repos = {img.repository, f"{img.registry}/{img.repository}"}
        labels = {f"{k}={v}" for k, v in img.labels.items()}
        return (
            (not sel.namespaces or img.namespace in sel.namespaces)
            and (not sel.repos or bool(repos & set(sel.repos)))
            and (not sel.labels or bool(labels & set(sel.labels)))
            and (not sel.digests or img.digest in sel.digests)
            and (
                not sel.include_tags
                or any(fnmatchcase(t, g) for t in img.tags for g in sel.include_tags)
            )
        )


def random_events(seed: int, n: int, *, tenants: int = 3, products: int = 40) -> list[Envelope]:
    """Index, re-index (changed contents), remove and advisories, interleaved."""
    rnd = random.Random(seed)
    live: set[tuple[str, int]] = set()
    out: list[Envelope] = []
    for k in range(n):
        roll = rnd.random()
        if roll < 0.1 and live:
            t, i = rnd.choice(sorted(live))
            live.discard((t, i))
            out.append(removed(t, i))
        elif roll < 0.15:
            rows = {
                f"CVE-{rnd.randrange(20)}": [
                    purl(rnd.randrange(products), 0)[1] for _ in range(rnd.randrange(1, 4))
                ]
            }
            out.append(feedser(f"x{k}", rows))
        else:
            t, i = f"t{rnd.randrange(tenants)}", rnd.randrange(n // 2 + 1)
            comps = {}
            for _ in range(rnd.randrange(0, 12)):
                p, pk = purl(int(products ** rnd.random()) - 1, rnd.randrange(3))
                comps[p] = (p, pk, rnd.random() < 0.3)
            live.add((t, i))
            out.append(
                indexed(
                    t,
                    i,
                    list(comps.values()),
                    namespace=rnd.choice([None, "web", "data"]),
                    repo=rnd.choice(["app", "lib/db"]),
                    tags=rnd.sample(["prod-1", "prod-2", "dev"], rnd.randrange(3)),
                    labels={"team": rnd.choice("ab")} if rnd.random() < 0.5 else {},
                    usage_known=rnd.choice([None, None, True, False]),
                )
            )
    return out
