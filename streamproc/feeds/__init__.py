"""The ``feeds`` role: an OSV directory watched, its new or changed advisories recorded as
Feedser exports — the pull side of the specification's push webhooks, run inside the system
(:mod:`streamproc.feeds.role`)."""
