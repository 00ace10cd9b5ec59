"""Impact index: which container images contain (or actually use) given packages.

Pure, I/O-free core: purl normalisation (``purls``), image selectors (``selector``),
the storage key layout and bounded bitmap store (``keys``), the roaring-bitmap index
(``index``) and SBOM purl extraction (``sbom``). The projector that folds events into
RocksDB plugs in through the store's loader hook and dirty-key export.
"""
