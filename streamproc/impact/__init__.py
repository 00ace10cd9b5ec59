"""Impact index: which container images contain (or actually use) given packages.

The engine is :class:`~streamproc.impact.index.ImpactIndex`, made of ``state``, ``ingest``,
``query`` and ``persist`` (storage layout in ``keys``, product groups in ``groups``, image
selectors in ``selector``, answers in ``results``); ``projection`` folds events into it,
``cli`` and ``stats`` load and inspect it. What it takes in — normalised purls and images —
comes from :mod:`streamproc.sbom`.
"""
