"""VEX documents in: OpenVEX, CycloneDX VEX and CSAF 2.0 VEX, each checked against its own
JSON Schema and normalised to claims (docs/vex.md)."""
