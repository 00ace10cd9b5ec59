"""``links.js`` on its own (Node, when installed): which values become link targets."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from streamproc.console.routes import STATIC_DIR

NODE = shutil.which("node")
CASES = {
    "https://osv.dev/vulnerability/CVE-1": "https://osv.dev/vulnerability/CVE-1",
    "http://example.test/a?b=c": "http://example.test/a?b=c",
    "HTTPS://EXAMPLE.TEST": "https://example.test/",
    "javascript:alert(1)": None,
    " JavaScript:alert(1)": None,
    "java\tscript:alert(1)": None,
    "data:text/html,<script>alert(1)</script>": None,
    "vbscript:msgbox(1)": None,
    "file:///etc/passwd": None,
    "//evil.example/x": None,
    "/api/v1/scheduler/runs": None,
    "#/runs/x": None,
    "": None,
}


@pytest.mark.skipif(NODE is None, reason="needs node")
def test_only_absolute_http_and_https_urls_are_link_targets() -> None:
    module = json.dumps((STATIC_DIR / "links.js").as_uri())
    script = (
        f"import {{ externalHref, safeHref }} from {module};"
        f"const cases = {json.dumps(list(CASES))};"
        "console.log(JSON.stringify([cases.map(externalHref), "
        "['#/runs/x', 'javascript:x', 'https://a.test/'].map(safeHref), externalHref(null)]));"
    )
    assert NODE is not None
    out = subprocess.run([NODE, "--input-type=module", "-e", script], capture_output=True,
                         text=True, timeout=30, check=True)  # fmt: skip
    external, safe, nothing = json.loads(out.stdout)
    assert dict(zip(CASES, external, strict=True)) == CASES
    assert safe == ["#/runs/x", None, "https://a.test/"] and nothing is None
