"""Tamper-evidence for the audit trail: a per-tenant hash chain, RFC 6962 Merkle batch roots
and DSSE/Ed25519-signed snapshots, so an auditor can verify history without trusting storage.

Everything here is pure computation (no I/O, no clocks) so it can be verified offline.
"""
