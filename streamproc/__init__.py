"""streamproc: keeps container-image verdicts current, event-sourced on NATS JetStream."""

__version__ = "0.1.0"
