"""CSAF 2.0 VEX (``document.category`` ``csaf_vex``): per vulnerability, the
``product_status`` lists of product ids, and the ``flags`` that justify ``known_not_affected``.

A product id names a purl through its ``product_identification_helper.purl`` (in the
branches or ``full_product_names``), or, for a relationship's product ("X as a component of
Y", how vendors such as Red Hat name packages per platform), through the component it
refers to. Product ids without a purl (CPE-only platforms) are skipped.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from streamproc.vex.claims import Collector
from streamproc.vex.model import Document, Status, VexError, clip

STATUS: dict[str, Status] = {
    "known_not_affected": "not_affected",
    "known_affected": "affected",
    "first_affected": "affected",
    "last_affected": "affected",
    "fixed": "fixed",
    "first_fixed": "fixed",
    "under_investigation": "under_investigation",
}
"""``recommended`` names the version to move to, not a status of the product: not read."""


def _products(tree: dict[str, Any]) -> Iterator[dict[str, Any]]:
    stack = list(tree.get("branches") or [])
    yield from tree.get("full_product_names") or []
    while stack:
        b = stack.pop()
        if isinstance(b.get("product"), dict):
            yield b["product"]
        stack.extend(b.get("branches") or [])


def _purls(tree: dict[str, Any]) -> dict[str, str | None]:
    """Product id → purl (None when it has none)."""
    out: dict[str, str | None] = {}
    for p in _products(tree):
        helper = p.get("product_identification_helper") or {}
        out[p["product_id"]] = helper.get("purl")
    refs = {
        r["full_product_name"]["product_id"]: r["product_reference"]
        for r in tree.get("relationships") or []
    }
    for pid, ref in refs.items():
        seen = {pid}
        while ref in refs and ref not in seen:  # a component of a component
            seen.add(ref)
            ref = refs[ref]
        out[pid] = out.get(pid) or out.get(ref)
    return out


def _groups(tree: dict[str, Any]) -> dict[str, list[str]]:
    return {g["group_id"]: list(g["product_ids"]) for g in tree.get("product_groups") or []}


def _justifications(v: dict[str, Any], groups: dict[str, list[str]]) -> dict[str, str]:
    """Product id → why it is not affected: its flag's label, else its impact statement."""
    out: dict[str, str] = {}
    for t in v.get("threats") or []:
        if t.get("category") == "impact" and t.get("details"):
            for pid in t.get("product_ids") or []:
                out.setdefault(pid, t["details"])
    for f in v.get("flags") or []:
        ids = list(f.get("product_ids") or [])
        for g in f.get("group_ids") or []:
            ids.extend(groups.get(g, []))
        for pid in ids:
            out[pid] = f["label"]
    return out


def parse(doc: dict[str, Any]) -> Document:
    meta = doc["document"]
    if meta.get("category") != "csaf_vex":
        raise VexError(
            422,
            "not-vex",
            f"a CSAF document of category {meta.get('category')!r}: only the VEX profile "
            "(csaf_vex) carries VEX statements",
            field="$.document.category",
        )
    tree = doc.get("product_tree") or {}
    purls = _purls(tree)
    groups = _groups(tree)
    tracking = meta["tracking"]
    default_ts = str(tracking.get("current_release_date") or "")
    out = Collector()
    vulns = doc.get("vulnerabilities") or []
    for n, v in enumerate(vulns):
        ids = [v["cve"]] if v.get("cve") else [i["text"] for i in v.get("ids") or []]
        vuln = ids[0] if ids else ""
        why = _justifications(v, groups)
        for field, status in STATUS.items():
            for pid in (v.get("product_status") or {}).get(field) or []:
                where = f"vulnerabilities[{n}].product_status.{field}"
                purl = purls.get(pid)
                if purl is None:
                    out.skip(where, f"product {pid!r} has no purl")
                    continue
                just = clip(why.get(pid)) if status == "not_affected" else None
                out.add(purl, vuln, status, just, None, (default_ts, n), where)
    return out.document("csaf", str(tracking.get("id") or ""), str(tracking["version"]), len(vulns))
