"""Ingress: the HTTP servers the cluster and its users call into.

Each module here is one endpoint, started by the process that owns it (today the worker process
serves `uploads`, so uploaded bytes land in the spool of the worker that publishes them). Ingress
code is not run by Temporal: it may block and do I/O, and it reaches workflows only by signal,
through the names declared in `api_models.contract`. What it shares with activities (the upload
session record, the content classifier) it imports from `clients`, never from `activities`.
"""
