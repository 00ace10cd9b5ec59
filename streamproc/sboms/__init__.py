"""The SBOM store's retention: which stored SBOMs images use (a fold of the planner), and
the deleter that removes those no image has used for ``sboms.retention_s`` (a reactor that
runs where the planner's lease is held).

Reading an SBOM and turning it into an ``image.indexed`` event is :mod:`streamproc.sbom`."""
