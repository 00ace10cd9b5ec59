"""The Scheduler REST API: its operations as data (routes, models, OpenAPI), the handlers,
and the views and write path they share. Handlers are given the gateway's context
(``streamproc/gateway/context.py``); this package never imports ``app.py``, which mounts it."""
