"""Regenerate the demo SBOMs (package data in streamproc/scanner/demo_data/sboms, which the
tests reach through the links beside this file) from this machine's real package sets.

Run with the project venv: ``.venv/bin/python tests/data/sboms/generate.py``. Debian
packages come from dpkg-query, Python packages from ``pip list``; output is deterministic
for a given machine (fixed timestamp, content-derived serial numbers).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import uuid
from pathlib import Path

from packageurl import PackageURL

HERE = Path(__file__).resolve().parents[3] / "streamproc" / "scanner" / "demo_data" / "sboms"
STAMP = "2025-01-01T00:00:00Z"


def debs(keep: str) -> list[tuple[str, str, str]]:
    """(name, version, purl) of installed packages whose 'priority section' matches."""
    fmt = "${Package}\t${Version}\t${Architecture}\t${Priority} ${Section}\n"
    out = subprocess.run(["dpkg-query", "-W", "-f", fmt], capture_output=True, text=True)
    rows = [line.split("\t") for line in out.stdout.splitlines()]
    return sorted(
        (n, v, PackageURL("deb", "debian", n, v, {"arch": a}).to_string())
        for n, v, a, ps in rows
        if re.fullmatch(keep, ps)
    )


def pypi() -> list[tuple[str, str, str]]:
    out = subprocess.run(
        [sys.executable, "-m", "pip", "list", "--format", "json"], capture_output=True, text=True
    )
    return sorted(
        (p["name"], p["version"], PackageURL("pypi", None, p["name"], p["version"]).to_string())
        for p in json.loads(out.stdout)
    )


def cdx_component(name: str, version: str, purl: str) -> dict[str, object]:
    return {"type": "library", "bom-ref": purl, "name": name, "version": version, "purl": purl}


def cyclonedx(spec: str, subject: str, components: list[dict[str, object]]) -> dict[str, object]:
    serial = uuid.uuid5(uuid.NAMESPACE_URL, json.dumps(components, sort_keys=True))
    return {
        "bomFormat": "CycloneDX",
        "specVersion": spec,
        "serialNumber": f"urn:uuid:{serial}",
        "version": 1,
        "metadata": {
            "timestamp": STAMP,
            "component": {"type": "container", "bom-ref": subject, "name": subject},
        },
        "components": components,
    }


def spdx(spec: str, subject: str, pkgs: list[tuple[str, str, str]]) -> dict[str, object]:
    def ident(purl: str) -> str:
        return "SPDXRef-Package-" + re.sub(r"[^A-Za-z0-9.-]", "-", purl.removeprefix("pkg:"))

    packages = [
        {
            "name": name,
            "SPDXID": ident(purl),
            "versionInfo": version,
            "downloadLocation": "NOASSERTION",
            "filesAnalyzed": False,
            "licenseConcluded": "NOASSERTION",
            "licenseDeclared": "NOASSERTION",
            "copyrightText": "NOASSERTION",
            "externalRefs": [
                {
                    "referenceCategory": "PACKAGE-MANAGER"
                    if spec == "SPDX-2.2"
                    else "PACKAGE_MANAGER",
                    "referenceType": "purl",
                    "referenceLocator": purl,
                }
            ],
        }
        for name, version, purl in pkgs
    ]
    root = {"name": subject, "SPDXID": "SPDXRef-Image", "downloadLocation": "NOASSERTION"}
    root |= {"filesAnalyzed": False, "licenseConcluded": "NOASSERTION"}
    root |= {"licenseDeclared": "NOASSERTION", "copyrightText": "NOASSERTION"}
    rels = [
        {"spdxElementId": "SPDXRef-Image", "relationshipType": "CONTAINS", "relatedSpdxElement": p}
        for p in (pkg["SPDXID"] for pkg in packages)
    ]
    return {
        "spdxVersion": spec,
        "dataLicense": "CC0-1.0",
        "SPDXID": "SPDXRef-DOCUMENT",
        "name": subject,
        "documentNamespace": f"https://streamproc.invalid/spdx/{subject}",
        "creationInfo": {"created": STAMP, "creators": ["Tool: streamproc-generate"]},
        "documentDescribes": ["SPDXRef-Image"],
        "packages": [root, *packages],
        "relationships": rels,
    }


def main() -> None:
    py = pypi()
    nested = [
        {"type": "operating-system", "name": "debian", "version": "12",
         "components": [cdx_component(*d) for d in debs(r"\S+ (utils|admin)")]},
        {"type": "application", "name": "streamproc", "version": "0.1.0",
         "components": [{"type": "framework", "name": "venv",
                         "components": [cdx_component(*p) for p in py]}]},
    ]  # fmt: skip
    docs = {
        "debian-base.cdx15.json": cyclonedx(
            "1.5",
            "debian-base",
            [cdx_component(*d) for d in debs(r"(required|important|standard) .*")],
        ),
        "tools-nested.cdx16.json": cyclonedx("1.6", "tools", nested),
        "python-app.spdx23.json": spdx("SPDX-2.3", "python-app", py + debs(r"\S+ python")),
        "debian-libs.spdx22.json": spdx("SPDX-2.2", "debian-libs", debs(r"optional libs")),
    }
    for name, doc in docs.items():
        (HERE / name).write_text(json.dumps(doc, indent=1) + "\n")
        print(name)


if __name__ == "__main__":
    main()
