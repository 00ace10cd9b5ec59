"""Derived state: the storage contract, its backends, and every reserved name."""
