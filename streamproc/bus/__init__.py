"""NATS JetStream: connections, streams, publishing and consuming (running the server is
:mod:`streamproc.natsd`)."""
