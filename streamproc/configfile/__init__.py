"""One TOML settings file for every role and command (``--config`` / ``STREAMPROC_CONFIG``),
every key also an environment variable, secrets from files; ``streamproc config check``.

The registry of keys is :mod:`streamproc.configfile.registry` (imported by
:mod:`streamproc.config`, so this package imports nothing itself); reading the file and the
environment into the process's :class:`~streamproc.config.Configuration` is
:func:`streamproc.configfile.loader.activate`; the reference is ``docs/configuration.md``.
"""
