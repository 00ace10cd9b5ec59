"""Tamper-evidence for the audit trail: a per-tenant hash chain, RFC 6962 Merkle batch roots
and DSSE/Ed25519-signed snapshots, so an auditor can verify history without trusting storage.

``merkle``, ``dsse`` and ``chain`` are pure computation (no I/O, no clocks), so they verify
offline; the ``auditor`` role (``role.AUDITOR``) folds the chains and signs the snapshots.
See docs/audit.md.
"""
