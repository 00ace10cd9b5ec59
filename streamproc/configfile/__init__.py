"""One TOML settings file for every role and command (``--config`` / ``STREAMPROC_CONFIG``),
every key also an environment variable, secrets from files; ``streamproc config check``.

The registry of keys is :mod:`streamproc.configfile.registry`; the reference is
``docs/configuration.md``.
"""

from __future__ import annotations

from streamproc.configfile.loader import ConfigFileError, Problem, activate, reset

__all__ = ["ConfigFileError", "Problem", "activate", "reset"]
