"""NATS JetStream: the embedded server, connections, streams, publishing and consuming."""
