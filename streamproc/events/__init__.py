"""The event envelope, the catalog of event kinds, and their JSON Schemas."""

from streamproc.events.catalog import KINDS, KindSpec, spec_for, subject_for
from streamproc.events.envelope import Envelope, EventError, decode, encode, new_event

__all__ = [
    "KINDS",
    "Envelope",
    "EventError",
    "KindSpec",
    "decode",
    "encode",
    "new_event",
    "spec_for",
    "subject_for",
]
