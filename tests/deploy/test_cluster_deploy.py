"""The cluster deployment files: the loopback cluster's confs and scripts (run for real), the
systemd units and the compose file (checked: they cannot run here)."""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
from pathlib import Path

import pytest
import yaml

from streamproc.bus import streams
from streamproc.bus.connect import connect
from streamproc.bus.topology import cluster_size
from streamproc.cli import build_parser
from streamproc.configfile.registry import known_env
from streamproc.natsd.cluster import DEPLOY_PORTS, NodePorts, free_ports, node_config
from streamproc.natsd.server import find_binary
from tests.helpers import eventually

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
CLUSTER = DEPLOY / "nats" / "cluster"
SYSTEMD = DEPLOY / "systemd"
ROLES = ("gateway", "planner", "runner", "auditor", "feeds")


def without_comments(text: str) -> str:
    return "".join(line for line in text.splitlines(keepends=True) if not line.startswith("#"))


def nats_check(conf: Path, **env: str) -> None:
    got = subprocess.run(
        [find_binary(), "-t", "-c", str(conf)],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=30,
    )
    assert got.returncode == 0 and "is valid" in got.stdout + got.stderr, got.stderr


def test_the_loopback_confs_are_what_the_cluster_helper_writes() -> None:
    routes = [DEPLOY_PORTS[1] + i for i in range(3)]
    for i in range(3):
        name = f"n{i + 1}"
        conf = CLUSTER / f"{name}.conf"
        ports = NodePorts(*(p + i for p in DEPLOY_PORTS))
        store = f"./data/nats-cluster/{name}/jetstream"
        assert without_comments(conf.read_text()) == node_config(
            name, store, "127.0.0.1", ports, routes
        )
        nats_check(conf)
    nats_check(DEPLOY / "nats" / "single-node.conf")
    nats_check(DEPLOY / "compose" / "nats.conf", NATS_SERVER_NAME="nats-1")


def gone(pid: int) -> bool:
    """Exited: no such process, or a zombie its new parent (init) has not reaped yet."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


def _pids(data: Path) -> list[int]:
    return [int(p.read_text()) for p in sorted(data.glob("n?.pid"))]


def scripts_on_free_ports(tmp_path: Path) -> tuple[Path, dict[int, int]]:
    """Copies of the confs (moved to free ports) and of the scripts as shipped."""
    here = tmp_path / "deploy" / "nats" / "cluster"
    here.mkdir(parents=True)
    shipped = [port for base in DEPLOY_PORTS for port in range(base, base + 3)]
    moved = dict(zip(shipped, free_ports("127.0.0.1", len(shipped)), strict=True))  # distinct
    for name in ("n1.conf", "n2.conf", "n3.conf"):
        text = (CLUSTER / name).read_text()
        text = re.sub(r":(\d{4})\b", lambda m: f":{moved.get(int(m[1]), int(m[1]))}", text)
        (here / name).write_text(text)
    for script in ("start.sh", "stop.sh"):
        shutil.copy2(CLUSTER / script, here / script)
    return here, moved


async def test_start_sh_runs_a_3_node_cluster_and_stop_sh_stops_it(
    tmp_path: Path, prefix: str
) -> None:
    here, moved = scripts_on_free_ports(tmp_path)
    env = {**os.environ, "NATS_SERVER": find_binary()}
    data = tmp_path / "data" / "nats-cluster"
    launched: list[int] = []
    try:
        started = subprocess.run(
            [str(here / "start.sh")], cwd=tmp_path, env=env, capture_output=True, text=True,
            timeout=60,
        )  # fmt: skip
        assert started.returncode == 0, started.stderr
        url = started.stdout.strip().splitlines()[-1].removeprefix("NATS_URL=")
        assert url.count("nats://127.0.0.1:") == 3 and str(moved[4222]) in url
        launched = _pids(data)
        assert len(launched) == 3
        again = subprocess.run(
            [str(here / "start.sh")], cwd=tmp_path, env=env, capture_output=True, text=True,
            timeout=60,
        )  # fmt: skip
        assert again.returncode == 0 and again.stdout.count("already running") == 3
        nc = await connect(url)
        try:
            # start.sh returns once a metadata leader is elected (a quorum of 2); the third
            # node's route may still be forming, so wait for the full mesh to be announced.
            await eventually(lambda: cluster_size(nc) == 3, what="3 servers announced")
            results = await streams.apply(nc, streams.definitions(prefix, streams.AUTO))
            assert {r.action for r in results} == {"created"}
            from streamproc.bus import jsapi

            info = await jsapi.stream_info(nc, results[0].stream)
            assert info is not None and info.config["num_replicas"] == 3
        finally:
            await nc.close()
        stopped = subprocess.run(
            [str(here / "stop.sh")], cwd=tmp_path, capture_output=True, text=True, timeout=60
        )
        assert stopped.returncode == 0, stopped.stderr
        assert stopped.stdout.count("stopped") == 3 and not _pids(data)
        assert all(gone(pid) for pid in launched)
        assert (data / "n1" / "jetstream").is_dir(), "the stores stay"
    finally:
        for pid in {*launched, *_pids(data)}:  # only what this test's start.sh started
            if gone(pid):
                continue
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def test_start_sh_says_which_node_did_not_start(tmp_path: Path) -> None:
    here, moved = scripts_on_free_ports(tmp_path)
    data = tmp_path / "data" / "nats-cluster"
    with socket.socket() as taken:  # n2's client port is in use
        taken.bind(("127.0.0.1", moved[4223]))
        taken.listen()
        try:
            got = subprocess.run(
                [str(here / "start.sh")], cwd=tmp_path, capture_output=True, text=True,
                env={**os.environ, "NATS_SERVER": find_binary()}, timeout=60,
            )  # fmt: skip
            assert got.returncode == 1
            assert "n2 exited while starting" in got.stderr
            assert "address already in use" in got.stderr
        finally:
            subprocess.run([str(here / "stop.sh")], cwd=tmp_path, capture_output=True, timeout=60)
            for pid in _pids(data):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)


def unit_entries(path: Path) -> dict[str, list[tuple[str, str]]]:
    """A unit file's ``[Section]`` → ``(key, value)`` pairs (keys may repeat)."""
    out: dict[str, list[tuple[str, str]]] = {}
    section = ""
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line.strip("[]")
            out[section] = []
            continue
        key, _, value = line.partition("=")
        out[section].append((key.strip(), value.strip()))
    return out


def values(entries: list[tuple[str, str]], key: str) -> list[str]:
    return [v for k, v in entries if k == key]


def env_names(text: str) -> set[str]:
    return {
        line.split("=", 1)[0].strip()
        for line in text.splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    }


def test_systemd_units_run_each_role_from_its_own_state_directory() -> None:
    known = known_env()
    parser = build_parser()
    for role in ROLES:
        unit = unit_entries(SYSTEMD / f"streamproc-{role}@.service")
        svc = unit["Service"]
        assert values(svc, "Restart") == ["on-failure"]
        assert values(svc, "StateDirectory") == [f"streamproc/{role}-%i"]
        assert "/etc/streamproc/streamproc.env" in values(svc, "EnvironmentFile")
        assert f"-/etc/streamproc/{role}-%i.env" in values(svc, "EnvironmentFile")
        for key, want in (("NoNewPrivileges", "yes"), ("ProtectSystem", "strict"),
                          ("PrivateTmp", "yes"), ("CapabilityBoundingSet", "")):  # fmt: skip
            assert values(svc, key) == [want], (role, key)
        for assignment in values(svc, "Environment"):
            assert assignment.split("=", 1)[0] in known, assignment
        (exec_start,) = values(svc, "ExecStart")
        argv = shlex.split(exec_start.replace("${STATE_DIRECTORY}", "/var/lib/x"))
        assert argv[0].endswith("/streamproc") and argv[1] == role
        args = parser.parse_args(argv[1:])  # the command line is one the CLI accepts
        assert args.data_dir == "/var/lib/x"
        assert unit["Install"] == [("WantedBy", "multi-user.target")]
    assert env_names((SYSTEMD / "streamproc.env").read_text()) <= known
    gateway = unit_entries(SYSTEMD / "streamproc-gateway@.service")["Service"]
    assert values(gateway, "LoadCredential") == ["dpop-nonce:/etc/streamproc/dpop-nonce.secret"]
    assert "STREAMPROC_GATEWAY_DPOP_NONCE_SECRET_FILE=%d/dpop-nonce" in values(
        gateway, "Environment"
    )


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze")
def test_systemd_analyze_verify_accepts_the_units(tmp_path: Path) -> None:
    """systemd's own check (unknown keys, bad values); the binaries point at this checkout."""
    names = []
    for path in sorted(SYSTEMD.glob("*@.service")):
        text = path.read_text().replace("/opt/streamproc/.venv/bin/streamproc", str(
            Path(find_binary()).with_name("streamproc"))).replace(
            "/usr/local/bin/nats-server", find_binary())  # fmt: skip
        target = tmp_path / path.name.replace("@.", "@test.")
        target.write_text(text)
        names.append(str(target))
    got = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", *names],
        capture_output=True, text=True, timeout=60, cwd=tmp_path,
    )  # fmt: skip
    assert got.returncode == 0 and not got.stderr.strip() and not got.stdout.strip(), got.stderr


def test_compose_file_runs_three_nats_nodes_and_every_role() -> None:
    doc = yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())
    services = doc["services"]
    nats = {n: s for n, s in services.items() if n.startswith("nats-")}
    assert sorted(nats) == ["nats-1", "nats-2", "nats-3"]
    for name, svc in nats.items():
        assert svc["environment"] == {"NATS_SERVER_NAME": name}
        assert f"{name}:/data" in svc["volumes"]
    roles = {n: s for n, s in services.items() if n not in nats}
    commands = {n: s["command"][0] for n, s in roles.items()}
    assert set(ROLES) <= set(commands.values())
    assert list(commands.values()).count("planner") == 2, "an active and a standby planner"
    parser = build_parser()
    known = known_env()
    node_ids, volumes = set(), set()
    for name, svc in roles.items():
        parser.parse_args([str(a) for a in svc["command"]])
        assert svc["restart"] == "on-failure" and svc["read_only"] is True
        env = svc.get("environment") or {}
        assert set(env) <= known, (name, set(env) - known)
        if svc["command"][0] in ROLES:
            assert env["NATS_URL"].count("nats://nats-") == 3
            node_ids.add(env["STREAMPROC_NODE_ID"])
            (state,) = [v for v in svc["volumes"] if v.endswith(":/var/lib/streamproc")]
            volumes.add(state.split(":")[0])
        for port in svc.get("ports", []):
            assert port.startswith("127.0.0.1:"), port
    n_roles = sum(1 for c in commands.values() if c in ROLES)
    assert len(node_ids) == len(volumes) == n_roles, "each process its own node id and state"
    assert set(doc["volumes"]) >= volumes
    # Two gateway replicas sharing what replicas must share (docs/roles.md).
    gateways = [s for s in roles.values() if s["command"][0] == "gateway"]
    assert len(gateways) == 2 and "scanner" in commands.values()
    shared = ("STREAMPROC_GATEWAY_DPOP_NONCE_SECRET_FILE", "STREAMPROC_GATEWAY_PUBLIC_BASE_URL")
    assert len({tuple(g["environment"][k] for k in shared) for g in gateways}) == 1
    assert all(g["secrets"] == ["dpop-nonce"] for g in gateways) and "dpop-nonce" in doc["secrets"]
