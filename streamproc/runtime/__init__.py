"""The role runtime: folds and the projections they make up, the projector that consumes,
folds, commits and acks, reactors, leases and leadership, replay, and the process runner
that runs a set of roles given their specs (the registry is :mod:`streamproc.roles`)."""
