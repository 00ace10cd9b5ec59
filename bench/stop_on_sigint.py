"""Does `streamproc up` stop on SIGINT? Start it, wait for "Press Ctrl-C", send SIGINT at a
random moment, and count the runs that are not gone 20 s later (docs/operations.md,
"Stopping"). The status heartbeat beats every 0.1 s, so SIGINT often meets its requests.

    python bench/stop_on_sigint.py --runs 60 --port-base 15270 [--code DIR]

``--code``: import streamproc from DIR instead (another checkout's tree, for an A/B); a
process that does not stop is killed (its nats-server goes with it) and counted.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time


def run_once(port: int, env: dict[str, str]) -> str:
    data = tempfile.mkdtemp(prefix="stop-on-sigint-")
    args = [sys.executable, "-m", "streamproc.cli", "up", "--data-dir", f"{data}/data",
            "--nats-port", str(port), "--http-port", str(port + 1)]  # fmt: skip
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
    p.add_argument("--runs", type=int, default=60)
    p.add_argument("--port-base", type=int, required=True, help="uses 10 ports from here")
    p.add_argument("--code", help="a directory holding the streamproc package to run")
    args = p.parse_args()
    env = {k: v for k, v in os.environ.items() if k not in ("NATS_URL", "STREAMPROC_DATA_DIR")}
    env["STREAMPROC_STATUS_INTERVAL_S"] = "0.1"
    if args.code:
        env["PYTHONPATH"] = args.code
    hangs = 0
    for i in range(args.runs):
        outcome = run_once(args.port_base + (i % 5) * 2, env)
        hangs += outcome == "HANG"
        print(f"{time.strftime('%H:%M:%S', time.gmtime())} run {i}: {outcome}", flush=True)
    print(f"runs {args.runs}, not stopped within 20 s: {hangs}", flush=True)


if __name__ == "__main__":
    main()
