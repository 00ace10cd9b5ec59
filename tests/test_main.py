"""The ``streamproc`` console script: a Ctrl-C while the command line is still being imported
ends it quietly, like a Ctrl-C later does."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import entry_points

from streamproc import exitcodes

# Makes the command line's import stop where a Ctrl-C in its first seconds would: inside the
# import of the roles, before the command has read a word.
INTERRUPTED_IMPORT = """
import sys

class CtrlC:
    def find_spec(self, name, path=None, target=None):
        if name == "streamproc.roles":
            raise KeyboardInterrupt
        return None

sys.meta_path.insert(0, CtrlC())
from streamproc.__main__ import main
sys.exit(main())
"""


def test_ctrl_c_during_the_import_ends_with_130_and_no_traceback() -> None:
    got = subprocess.run(
        [sys.executable, "-c", INTERRUPTED_IMPORT], capture_output=True, text=True, timeout=60
    )
    assert got.returncode == exitcodes.INTERRUPTED, got.stderr
    assert got.stderr == "" and got.stdout == ""


def test_the_console_script_and_python_m_run_the_command_through_it() -> None:
    (script,) = entry_points(group="console_scripts", name="streamproc")
    assert script.value == "streamproc.__main__:main"
    got = subprocess.run(
        [sys.executable, "-m", "streamproc", "--version"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert got.returncode == 0 and got.stdout.strip().endswith("0.1.0"), got
