"""SBOM input: what comes in before anything is indexed.

Package-URL normalisation (``purls``), reading CycloneDX and SPDX JSON SBOMs (``parse``),
the normalised image an SBOM becomes (``image``), and building and publishing its
``image.indexed`` event, the SBOM stored first (``publish``). The gateway's image routes,
``streamproc index add``, the scanners and the impact index all take their input from here.

Not :mod:`streamproc.sboms`, which keeps track of the SBOMs already stored (which images
use each one, and deleting those none uses).
"""
