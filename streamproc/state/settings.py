"""The storage settings, built from the process's typed ``[projector]`` section by the code
that opens a role's stores and projector (:func:`sizes_from`, :func:`trim_from`), and handed
to them as constructor arguments: the stores and the folds themselves read no setting (their
bounds are the registry's, checked when the sections are decoded)."""

from __future__ import annotations

from streamproc.configfile.registry import env_name
from streamproc.configfile.sections import Sections
from streamproc.state.store import StoreSizes

TRIM_ENV = env_name("projector.malloc_trim_s")


def sizes_from(sections: Sections) -> StoreSizes:
    """What a RocksDB store of this process is opened with (:class:`RocksStore`): the
    memtables (0: RocksDB's own defaults) and the block cache, in bytes."""
    p = sections.projector
    return StoreSizes(p.write_buffer_mb << 20, p.block_cache_mb << 20)


def trim_from(sections: Sections) -> float:
    """How often, at most, a projector hands glibc's free memory back (0: never)."""
    return sections.projector.malloc_trim_s
