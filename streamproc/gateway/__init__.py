"""The gateway: the Scheduler REST API and signed webhooks, turning requests into events.

It validates, authenticates, HLC-stamps and publishes, and answers from its own read model
(:mod:`streamproc.readmodel`); it never mutates state directly, and a refused request
publishes nothing.
"""
