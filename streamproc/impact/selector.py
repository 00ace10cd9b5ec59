"""Which images a query may see: a tenant plus optional AND-ed filters.

Within one filter the values are OR-ed ("namespace a or b"), different filters are AND-ed
and an empty list does not restrict. The tenant is mandatory so that no query can ever
reach across tenants.
"""

from __future__ import annotations

import fnmatch
import re
from functools import lru_cache

import msgspec

from streamproc.impact.keys import SEP

__all__ = ["Selector", "SelectorError", "tag_matcher"]


class SelectorError(ValueError):
    """A selector that cannot be applied (no tenant, malformed label, ...)."""


class Selector(msgspec.Struct, kw_only=True, rename="camel", forbid_unknown_fields=True):
    """Image filter; on the wire: tenant, namespaces, repos, labels, digests, includeTags.

    Unknown fields are refused: a misspelt filter silently widening the answer to the
    whole tenant is exactly the mistake we must not make.
    """

    tenant: str
    namespaces: list[str] = []
    repos: list[str] = []
    labels: list[str] = []
    """``"key=value"``; the value may be empty but the ``=`` is required."""
    digests: list[str] = []
    include_tags: list[str] = []
    """fnmatch-style globs (``*``, ``?``, ``[seq]``), case-sensitive, e.g. ``"prod-*"``."""

    def __post_init__(self) -> None:
        if not self.tenant:
            raise SelectorError("selector.tenant is required")
        if SEP in self.tenant:
            raise SelectorError("selector.tenant must not contain NUL")
        for label in self.labels:
            if "=" not in label or label.startswith("="):
                raise SelectorError(f"selector label {label!r} is not of the form key=value")


@lru_cache(maxsize=1024)
def _compile(patterns: tuple[str, ...]) -> re.Pattern[str]:
    return re.compile("|".join(f"(?:{fnmatch.translate(p)})" for p in patterns))


def tag_matcher(patterns: list[str]) -> re.Pattern[str]:
    """One compiled regex for all globs: tags are matched with ``.match(tag)``."""
    return _compile(tuple(sorted(set(patterns))))
