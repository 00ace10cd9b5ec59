"""The ``feeds`` role: the ledger of what it recorded, and the reactor that watches the OSV
directory (:mod:`streamproc.feeds.reactor`), active in one process at a time.

Registered in :mod:`streamproc.roles` as ``"feeds": FEEDS``.
"""

from __future__ import annotations

from streamproc.feeds.ledger import Ledger
from streamproc.feeds.reactor import FeedsReactor
from streamproc.runtime.reactor import RoleSpec

FEEDS = RoleSpec(
    [Ledger],
    [lambda settings: FeedsReactor(settings)],
    singleton=True,  # one recorder at a time; a standby folds the ledger
)
