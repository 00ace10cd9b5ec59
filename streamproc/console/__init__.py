"""The operator console: static pages served by the gateway at ``/ui`` (see docs/console.md)."""
