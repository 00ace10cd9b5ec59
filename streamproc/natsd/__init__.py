"""Running nats-server: the embedded server, the one owner of its store, a local cluster, and
the session a one-shot command opens on whichever server owns the data directory."""
