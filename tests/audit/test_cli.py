"""``chain`` and ``bundle`` commands as an operator runs them: real processes, a real state
directory, the real nats-server. (Run through ``python -m streamproc.audit.cli``, which mounts
the same ``register`` that ``streamproc`` does.)"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path

import msgspec

from streamproc.audit import layout
from streamproc.bus import streams
from streamproc.bus.fastclient import FastClient
from streamproc.natsd.server import EmbeddedNats
from streamproc.state.store import RocksStore
from tests.audit.conftest import Pristine
from tests.audit.helpers import KEY_ID, SEED, fold, signer
from tests.audit.test_tamper import change_digest

PUBLIC = f"{KEY_ID}={base64.b64encode(bytes(signer().signing_key.verify_key)).decode()}"


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("STREAMPROC_", "NATS_"))}
    return subprocess.run(
        [sys.executable, "-m", "streamproc.audit.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**clean, **(env or {})},
    )


def link_at(state: Path, tenant: str, position: int) -> str:
    store = RocksStore(state, read_only=True)
    try:
        e = layout.entry_at(store, tenant, position)
        assert e is not None
        return e.chain_link
    finally:
        store.close()


def test_verify_prove_and_check_a_proof_offline(auditor_copy: Path, tmp_path: Path) -> None:
    data = ["--data-dir", str(tmp_path / "nodata")]
    ok = run("chain", "verify", "--state-dir", str(auditor_copy), "--trusted-key", PUBLIC, *data)
    assert ok.returncode == 0, ok.stderr
    assert "acme: OK — 230 entries, 4 signed snapshots covering 200" in ok.stdout
    assert "beta: OK — 40 entries" in ok.stdout

    no_keys = run("chain", "verify", "--state-dir", str(auditor_copy), *data)
    assert no_keys.returncode == 2 and "no trusted keys" in no_keys.stderr

    proof = tmp_path / "proof.json"
    link = link_at(auditor_copy, "acme", 120)
    made = run(
        "chain", "prove", "--tenant", "acme", "--entry", link,
        "--state-dir", str(auditor_copy), "--out", str(proof), *data,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    doc = json.loads(proof.read_text())
    assert (doc["leaf"], doc["index"], doc["batch_size"]) == (link, 20, 50)
    assert doc["snapshot"]["payloadType"] == "application/vnd.streamproc.audit.snapshot+json"

    checked = run("chain", "verify-proof", str(proof), "--trusted-key", PUBLIC, *data)
    assert checked.returncode == 0, checked.stderr
    assert checked.stdout.startswith("OK: entry 120 of tenant acme")
    bare_key = PUBLIC.split("=", 1)[1]
    assert (
        run("chain", "verify-proof", str(proof), "--trusted-key", bare_key, *data).returncode == 0
    )
    stranger = base64.b64encode(bytes(signer(b"\x09" * 32).signing_key.verify_key)).decode()
    refused = run("chain", "verify-proof", str(proof), "--trusted-key", stranger, *data)
    assert refused.returncode == 1 and "FAILED: snapshot signature" in refused.stdout
    doc["audit_path"][0] = "00" * 32
    proof.write_text(json.dumps(doc))
    bent = run("chain", "verify-proof", str(proof), "--trusted-key", PUBLIC, *data)
    assert bent.returncode == 1 and "does not lead to the signed merkle_root" in bent.stdout

    waiting = run(
        "chain", "prove", "--tenant", "acme", "--entry", link_at(auditor_copy, "acme", 210),
        "--state-dir", str(auditor_copy), *data,
    )  # fmt: skip
    assert waiting.returncode == 1 and "not covered by a snapshot yet" in waiting.stderr
    unknown = run(
        "chain", "prove", "--tenant", "acme", "--entry", "ab" * 32,
        "--state-dir", str(auditor_copy), *data,
    )  # fmt: skip
    assert unknown.returncode == 2 and "no audit entry" in unknown.stderr

    store = RocksStore(auditor_copy)
    store.commit(change_digest(store))
    store.close()
    broken = run(
        "chain", "verify", "--tenant", "acme", "--state-dir", str(auditor_copy),
        "--trusted-key", PUBLIC, *data,
    )  # fmt: skip
    assert broken.returncode == 1
    assert "acme: BROKEN — position 120: payload_digest does not match" in broken.stdout


def test_held_and_log_views(auditor_copy: Path, tmp_path: Path) -> None:
    data = ["--data-dir", str(tmp_path)]
    held = run("chain", "held", "--tenant", "acme", "--state-dir", str(auditor_copy), *data)
    assert held.returncode == 0, held.stderr
    assert "acme: nothing held (200 of 230 entries attested)" in held.stdout
    log = run(
        "chain", "log", "--tenant", "beta", "--limit", "3",
        "--state-dir", str(auditor_copy), *data,
    )  # fmt: skip
    rows = [json.loads(line) for line in log.stdout.splitlines()]
    assert [r["position"] for r in rows] == [0, 1, 2]
    assert (
        rows[0]["prev_chain_link"] is None and rows[1]["prev_chain_link"] == rows[0]["chain_link"]
    )
    missing = run("chain", "held", "--state-dir", str(tmp_path / "none"), *data)
    assert missing.returncode == 2 and "no auditor state" in missing.stderr
    bad = run("chain", "held", "--tenant", "Not A Tenant", *data)
    assert bad.returncode == 2


async def test_bundle_export_and_import(
    nats_server: EmbeddedNats,
    nc: FastClient,
    pristine: Pristine,
    auditor_copy: Path,
    prefix: str,
    tmp_path: Path,
) -> None:
    bundle = tmp_path / "beta.bundle"
    exporter = {
        "NATS_URL": nats_server.url,
        "STREAMPROC_AUDIT_SIGNING_KEY": SEED.hex(),
        "STREAMPROC_AUDIT_KEY_ID": KEY_ID,
    }
    out = run(
        "bundle", "export", "--tenant", "beta", "--out", str(bundle), "--prefix",
        pristine.prefix, "--state-dir", str(auditor_copy), "--data-dir", str(tmp_path),
        env=exporter,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "40 events of tenant beta" in out.stdout and f"signed by {KEY_ID}" in out.stdout
    envelope = msgspec.json.decode(bundle.read_bytes())
    assert envelope["payloadType"] == "application/vnd.streamproc.audit.bundle+json"

    await streams.apply(nc, streams.definitions(prefix))
    importer = {"NATS_URL": nats_server.url}
    args = ["bundle", "import", str(bundle), "--prefix", prefix, "--data-dir", str(tmp_path)]
    untrusted = run(*args, env=importer)
    assert untrusted.returncode == 2 and "no trusted keys" in untrusted.stderr
    first = run(*args, env={**importer, "STREAMPROC_AUDIT_TRUSTED_KEYS": PUBLIC})
    assert first.returncode == 0, first.stderr
    assert "40 events, 40 published, 0 already present" in first.stdout
    assert "exporter's chain head verified" in first.stdout
    again = run(*args, "--trusted-key", PUBLIC, env=importer)
    assert again.returncode == 0 and "0 published, 40 already present" in again.stdout
    stranger = base64.b64encode(bytes(signer(b"\x09" * 32).signing_key.verify_key)).decode()
    refused = run(*args, "--trusted-key", stranger, env=importer)
    assert refused.returncode == 1 and "bundle refused" in refused.stderr

    state = tmp_path / "imported"
    await fold(nc, streams.stream_names(prefix)[0], state, 40)
    a, b = RocksStore(state, read_only=True), RocksStore(auditor_copy, read_only=True)
    try:  # the importer rebuilt the exporter's chain exactly
        mine, theirs = layout.read_head(a, "beta"), layout.read_head(b, "beta")
        assert mine is not None and theirs is not None
        assert (mine.entries, mine.head_chain_link, mine.head_hlc) == (
            theirs.entries,
            theirs.head_chain_link,
            theirs.head_hlc,
        )
    finally:
        a.close()
        b.close()
