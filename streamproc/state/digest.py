"""A digest of a whole state directory, so two can be compared (replay vs. live, crash tests)."""

from __future__ import annotations

import hashlib

from streamproc.state.store import Store


def state_digest(store: Store) -> str:
    """SHA-256 over every column family's items in key order, boundaries length-prefixed."""
    h = hashlib.sha256()
    for cf in store.families():
        name = cf.encode()
        h.update(b"F" + len(name).to_bytes(4, "big") + name)
        for k, v in store.scan(cf):
            h.update(len(k).to_bytes(4, "big") + k + len(v).to_bytes(8, "big") + v)
    return h.hexdigest()
