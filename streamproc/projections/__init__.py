"""Projections hosted by the roles; each is a plain object with a pure fold."""
