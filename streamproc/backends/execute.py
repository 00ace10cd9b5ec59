"""Running a scanner tool on one SBOM: a subprocess, never a shell.

The SBOM goes through a private temporary file: created new (``O_EXCL``, mode 0600) in a
directory only this user can enter (mode 0700, made once per runner process and removed
when it closes), and removed after the call whatever happens; the command line is the
configured executable, the tool's fixed arguments, that file and the configured extra
arguments, never anything from a request. A bounded pool limits how many run at once; a
call that outlives its timeout has its whole process group killed (a tool's helpers die
with it).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Callable, Collection, Sequence

from streamproc.backends.model import ToolError

STDERR_TAIL = 600
"""Characters of a failed tool's standard error kept in the reason."""


class ToolRunner:
    def __init__(self, concurrency: int, timeout_s: float) -> None:
        self.pool = asyncio.Semaphore(concurrency)
        self.timeout_s = timeout_s
        self._dir: str | None = None
        self._calls = itertools.count()

    def _workdir(self) -> str:
        if self._dir is None or not os.path.isdir(self._dir):
            self._dir = tempfile.mkdtemp(prefix="streamproc-sbom-")  # mode 0700
        return self._dir

    async def run(
        self,
        argv_of: Callable[[str], Sequence[str]],
        sbom: bytes,
        filename: str,
        results: Collection[int] = (0,),
    ) -> tuple[bytes, float, int]:
        """Standard output of ``argv_of(path of the SBOM file)``, the seconds it ran and its
        exit status; :class:`ToolError` for a missing executable, a timeout or an exit
        status not in ``results`` (those a tool answers with: OSV-Scanner exits with 1 when
        it found vulnerabilities)."""
        async with self.pool:
            path = os.path.join(self._workdir(), f"{next(self._calls)}-{filename}")
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "wb") as fh:
                    fh.write(sbom)
                return await self._exec(list(argv_of(path)), results)
            finally:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)

    def close(self) -> None:
        """Remove the private directory (the process stops using the tool)."""
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    async def _exec(self, argv: list[str], results: Collection[int]) -> tuple[bytes, float, int]:
        t0 = time.perf_counter()
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                start_new_session=True,  # its own process group: a timeout kills it all
            )
        except FileNotFoundError:
            raise ToolError("missing_tool", f"{argv[0]}: no such executable") from None
        except PermissionError:
            raise ToolError("missing_tool", f"{argv[0]}: not executable") from None
        try:
            async with asyncio.timeout(self.timeout_s):
                out, err = await proc.communicate()
        except (TimeoutError, asyncio.CancelledError) as exc:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            with contextlib.suppress(Exception):
                await proc.wait()
            if isinstance(exc, asyncio.CancelledError):
                raise
            raise ToolError(
                "timeout", f"{os.path.basename(argv[0])} ran longer than {self.timeout_s:g} s"
            ) from None
        elapsed = time.perf_counter() - t0
        code = proc.returncode
        if code not in results:
            tail = err.decode(errors="replace").strip()[-STDERR_TAIL:]
            raise ToolError(
                "exit_status", f"{os.path.basename(argv[0])} exited with {code}: {tail}"
            )
        return out, elapsed, code or 0
