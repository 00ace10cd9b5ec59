"""What Notify consumes: the message contract, a durable consumer and the HTTP feed."""
