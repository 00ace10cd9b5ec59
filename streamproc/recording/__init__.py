"""Recording exports in the event log, shared by the roles that record them: the gateway's
webhooks and the ``feeds`` role."""
