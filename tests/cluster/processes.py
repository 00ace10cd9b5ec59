"""Roles as real processes for the fault tests: ``streamproc`` command lines started with
their own environment and log file, stopped with SIGTERM or killed with SIGKILL by pid."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp

from streamproc.gateway.auth import jwt
from tests.gateway.harness import HMAC_SECRET, ISSUER, ISSUER_KEY

BASE_ENV_DROP = ("STREAMPROC_", "NATS_URL")


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without any streamproc setting, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(BASE_ENV_DROP)}
    env.update(extra)
    return env


def gateway_config(directory: Path, tenants: tuple[str, ...] = ("acme",), **extra: Any) -> Path:
    """A gateway configuration trusting the harness's issuer (bearer tokens) and Feedser
    secret, written where ``STREAMPROC_GATEWAY_CONFIG`` can name it; ``extra`` keys are set
    over it (e.g. DPoP for replicas: ``required_modes``, ``public_base_url``, ``dpop``)."""
    directory.mkdir(parents=True, exist_ok=True)
    secret = directory / "feedser.secret"
    secret.write_text(HMAC_SECRET + "\n")
    doc: dict[str, Any] = {
        "issuers": [
            {
                "issuer": ISSUER,
                "tenants": ["*"],
                "keys": [{"kid": "k1", "public_key": jwt.b64url(bytes(ISSUER_KEY.verify_key))}],
            }
        ],
        "required_modes": ["bearer"],
        "webhooks": [
            {
                "name": "feedser-main",
                "kind": "feedser",
                "tenants": list(tenants),
                "hmac_secrets": [f"file:{secret}"],
            }
        ],
        "access_log": "off",
        "wait_timeout_s": 10,
        **extra,
    }
    path = directory / "gateway.json"
    path.write_text(json.dumps(doc))
    return path


class RoleProcess:
    """One ``python -m streamproc.cli ...`` child; its output goes to ``log``."""

    def __init__(self, name: str, args: list[str], env: dict[str, str], log: Path) -> None:
        self.name = name
        self.args = args
        self.env = env
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self._terminated = False

    def start(self) -> RoleProcess:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "streamproc.cli", *self.args],
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        self.starts += 1
        self._terminated = False
        return self

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        if self.running:
            assert self.proc is not None
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def terminate(self) -> None:
        """SIGTERM, once: a second one while shutting down would end the process."""
        if self.running and self.proc is not None and not self._terminated:
            self._terminated = True
            self.proc.send_signal(signal.SIGTERM)

    def stop(self, timeout: float = 30.0) -> int | None:
        """SIGTERM and wait (SIGKILL after ``timeout``); the exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def check_alive(self) -> None:
        if not self.running:
            code = self.proc.returncode if self.proc is not None else None
            raise AssertionError(f"{self.name} exited ({code}):\n{self.tail()}")


async def wait_ready(
    proc: RoleProcess, url: str, timeout: float = 60.0, *, supervised: bool = False
) -> None:
    """Until ``url``/readyz answers 200 (the role caught up with the stream head). An exit
    fails at once, unless ``supervised``: then a supervisor starts the process again."""
    deadline = time.monotonic() + timeout
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as s:
        while time.monotonic() < deadline:
            if not supervised:
                proc.check_alive()
            try:
                async with s.get(f"{url}/readyz") as r:
                    if r.status == 200:
                        return
            except (aiohttp.ClientError, TimeoutError):
                pass
            await asyncio.sleep(0.1)
    raise AssertionError(f"{proc.name} not ready within {timeout:.0f} s:\n{proc.tail()}")
