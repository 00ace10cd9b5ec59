"""Stand-ins for the grype, trivy and osv-scanner executables: each checks that its argv is
exactly what the real tool receives from streamproc, and prints the tool's own recorded
output (``STANDIN_OUTPUT``: a file under tests/data/scanners/<tool>/).

``STANDIN_LOG`` (a file) gets one JSON line per call: argv, and the SBOM file's mode, its
directory's mode and its SHA-256, so a test can check the file was private and is gone.
``STANDIN_MODE``: ``sleep`` (hang, with a child in the same process group), ``exit`` (fail
with exit status 3), ``garbage`` (print something that is not the tool's JSON),
``nopackages`` (OSV-Scanner's exit status 128: no package it knows). Like the real tool,
the osv-scanner stand-in exits with 1 when what it prints has vulnerabilities.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import subprocess
import sys
import time

EXPECTED = {
    "grype": lambda f, extra: [f"sbom:{f}", "-o", "json", *extra],
    "trivy": lambda f, extra: ["sbom", f, "--format", "json", *extra],
    "osv-scanner": lambda f, extra: ["scan", "--sbom", f, "--format", "json", *extra],
}
VERSIONS = {
    "trivy": b'{"Version":"0.58.1","VulnerabilityDB":{"Version":2,"UpdatedAt":'
    b'"2026-08-20T06:12:44Z","NextUpdate":"2026-08-21T06:12:44Z"}}',
    "osv-scanner": b"osv-scanner version: 2.0.2\ncommit: n/a\n",
}


def sbom_path(tool: str, args: list[str]) -> str:
    if tool == "grype":
        return args[0].removeprefix("sbom:")
    return args[1] if tool == "trivy" else args[2]


def main(tool: str) -> int:
    args = sys.argv[1:]
    if tool == "trivy" and args == ["version", "--format", "json"]:
        sys.stdout.buffer.write(VERSIONS["trivy"])
        return 0
    if tool == "osv-scanner" and args == ["--version"]:
        sys.stdout.buffer.write(VERSIONS["osv-scanner"])
        return 0
    extra = json.loads(os.environ.get("STANDIN_EXTRA", "[]"))
    path = sbom_path(tool, args) if args else ""
    want = EXPECTED[tool](path, extra)
    if args != want:
        print(f"{tool} stand-in: argv {args!r} is not {want!r}", file=sys.stderr)
        return 64
    if not (path.endswith(".cdx.json") or path.endswith(".spdx.json")):
        print(f"{tool} stand-in: {path} is not named as an SBOM", file=sys.stderr)
        return 65
    with open(path, "rb") as fh:
        data = fh.read()
    log = os.environ.get("STANDIN_LOG")
    if log:
        with open(log, "a") as fh:
            fh.write(json.dumps({
                "argv": [tool, *args],
                "mode": stat.S_IMODE(os.stat(path).st_mode),
                "dir_mode": stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode),
                "sha256": hashlib.sha256(data).hexdigest(),
                "pgid": os.getpgid(0),
                "pid": os.getpid(),
            }) + "\n")  # fmt: skip
    mode = os.environ.get("STANDIN_MODE", "")
    if mode == "sleep":
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        with open(os.environ["STANDIN_CHILD"], "w") as fh:
            fh.write(str(child.pid))
        time.sleep(600)
    if mode == "exit":
        print(f"{tool}: failed to load vulnerability db: no such file", file=sys.stderr)
        return 3
    if mode == "garbage":
        print("this is not JSON")
        return 0
    if mode == "nopackages" and tool == "osv-scanner":
        print("No package sources found, --help for usage information.", file=sys.stderr)
        return 128
    with open(os.environ["STANDIN_OUTPUT"], "rb") as fh:
        out = fh.read()
    sys.stdout.buffer.write(out)
    if tool == "osv-scanner" and b'"vulnerabilities": [\n' in out:
        return 1  # as OSV-Scanner does when it found vulnerabilities
    return 0


if __name__ == "__main__":
    sys.exit(main(os.path.basename(sys.argv[0])))
