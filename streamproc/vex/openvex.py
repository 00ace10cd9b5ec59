"""OpenVEX (0.2.0): ``statements[]`` of a vulnerability, products and a status.

A product is a purl (its ``@id`` or ``identifiers.purl``); a product with
``subcomponents`` claims the subcomponents as found in it, and when that product is an
image (``pkg:oci/…@sha256:…``) the claims hold for that image alone.
"""

from __future__ import annotations

from typing import Any

from streamproc.vex.claims import Collector, image_of
from streamproc.vex.model import Document, Status, clip


def _purl(product: dict[str, Any]) -> str | None:
    ident = product.get("identifiers") or {}
    purl = ident.get("purl") if isinstance(ident, dict) else None
    if isinstance(purl, str):
        return purl
    pid = product.get("@id")
    return pid if isinstance(pid, str) and pid.startswith("pkg:") else None


def parse(doc: dict[str, Any]) -> Document:
    out = Collector()
    default_ts = str(doc.get("last_updated") or doc.get("timestamp") or "")
    statements = doc.get("statements") or []
    for n, st in enumerate(statements):
        vuln = (st.get("vulnerability") or {}).get("name", "")
        status: Status = st["status"]
        why = st.get("justification") or st.get("impact_statement")
        order = (str(st.get("last_updated") or st.get("timestamp") or default_ts), n)
        for product in st.get("products") or []:
            outer = _purl(product)
            subs = product.get("subcomponents") or []
            if not subs:
                out.add(outer, vuln, status, clip(why), None, order, f"statements[{n}]")
                continue
            image = image_of(outer) if outer else None
            for sub in subs:
                out.add(_purl(sub), vuln, status, clip(why), image, order, f"statements[{n}]")
    return out.document(
        "openvex", str(doc.get("@id") or ""), str(doc.get("version", 1)), len(statements)
    )
