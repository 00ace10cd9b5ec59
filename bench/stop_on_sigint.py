"""Does `streamproc up` stop on SIGINT? Start it, wait for "Press Ctrl-C", send SIGINT at a
random moment, and count the runs that are not gone 20 s later (docs/operations.md,
"Stopping"). The status heartbeat beats every 0.1 s, so SIGINT often meets its requests.

    python bench/stop_on_sigint.py [--runs 30] [--port-base PORT] [--code DIR]

Without ``--port-base`` each run takes two free loopback ports. ``--code``: import
streamproc from DIR instead (another checkout's tree, for an A/B); a
process that does not stop is killed (its nats-server goes with it) and counted.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from streamproc.natsd.cluster import free_ports


def run_once(nats_port: int, http_port: int, env: dict[str, str]) -> str:
    data = tempfile.mkdtemp(prefix="stop-on-sigint-")
    args = [sys.executable, "-m", "streamproc.cli", "up", "--data-dir", f"{data}/data",
            "--nats-port", str(nats_port), "--http-port", str(http_port)]  # fmt: skip
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=env, cwd=tempfile.gettempdir())  # fmt: skip
    assert proc.stdout is not None
    seen = ""
    while "Press Ctrl-C" not in seen:
        line = proc.stdout.readline()
        if not line:
            return "did not start: " + seen[-300:]
        seen += line
    time.sleep(random.uniform(0.2, 1.5))
    proc.send_signal(signal.SIGINT)
    try:
        rest, _ = proc.communicate(timeout=20)
        return "clean" if "stopped cleanly" in rest else f"rc {proc.returncode}: {rest[-300:]}"
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return "HANG"
    finally:
        shutil.rmtree(data, ignore_errors=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=30)
    p.add_argument("--port-base", type=int, help="uses 10 ports from here (default: free ones)")
    p.add_argument("--code", help="a directory holding the streamproc package to run")
    args = p.parse_args()
    env = {k: v for k, v in os.environ.items() if k not in ("NATS_URL", "STREAMPROC_DATA_DIR")}
    env["STREAMPROC_STATUS_INTERVAL_S"] = "0.1"
    if args.code:
        env["PYTHONPATH"] = args.code
    hangs = clean = 0
    for i in range(args.runs):
        if args.port_base is None:
            nats_port, http_port = free_ports("127.0.0.1", 2)
        else:
            nats_port = args.port_base + (i % 5) * 2
            http_port = nats_port + 1
        outcome = run_once(nats_port, http_port, env)
        hangs += outcome == "HANG"
        clean += outcome == "clean"
        print(f"{time.strftime('%H:%M:%S', time.gmtime())} run {i}: {outcome}", flush=True)
    print(f"{'runs':<28}{args.runs:>6}")
    print(f"{'stopped cleanly':<28}{clean:>6}")
    print(f"{'not stopped within 20 s':<28}{hangs:>6}")
    print(json.dumps({"runs": args.runs, "stopped_cleanly": clean, "not_stopped_20s": hangs}))


if __name__ == "__main__":
    main()
