"""The reference scanner (OSV advisories, KEV, real version ranges) and the Feedser export."""
