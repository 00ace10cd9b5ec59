"""Scanner backends that run a real tool on the stored SBOM: Trivy, Grype, OSV-Scanner.

Each tool's JSON becomes the same findings the reference scanner's ``/reports`` gives
(:mod:`.model`), through one function (:func:`streamproc.backends.findings.settle`) that
every backend's findings pass before a verdict is built. docs/scanner.md says how to set
each kind up.
"""
