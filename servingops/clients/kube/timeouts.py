"""The request timeouts of every apiserver call, chosen once.

A value is what urllib3 takes as `_request_timeout`: seconds for the whole read, or (connect, read). A site
that needs another bound names one of these; none spells a number of its own.
"""

from __future__ import annotations

Timeout = float | tuple[float, float]

REQUEST_TIMEOUT: Timeout = 30
"""Every call unless named otherwise: long enough for a list of a busy namespace, short enough that a hung
connection fails the attempt (and Temporal retries it) well inside an activity's start-to-close timeout."""

MEMBER_REQUEST_TIMEOUT: Timeout = 15
"""A call in a member cluster (activities/placement/member.py): a member that does not answer is reported
unreachable for this pass rather than hold the placement pass."""

ENDPOINT_READ_TIMEOUT: Timeout = 10
"""A read made while an HTTP client waits on the upload endpoint: it answers 503 and Retry-After instead."""

ADMISSION_READ_TIMEOUT: Timeout = (2.0, 3.0)
"""A read inside the admission webhook: the apiserver gives the whole webhook call 10 s (the chart's
timeoutSeconds), and a lookup that fails has to leave time to answer with the failure policy."""

CATALOG_SECRET_TIMEOUT: Timeout = (5.0, 10.0)
"""The catalog endpoint's read of its credentials Secret, made while a client waits for its answer."""

CATALOG_LIST_TIMEOUT: Timeout = (5.0, 30.0)
"""One page of the catalog endpoint's ClusterModel list (a page can be large: the read gets the default)."""

WATCH_SECONDS = 240
"""How long the apiserver keeps one watch open (its timeoutSeconds) before the watcher opens the next one from
the last resourceVersion it saw."""

WATCH_REQUEST_TIMEOUT: Timeout = WATCH_SECONDS + 30
"""The one longer bound: a watch's HTTP request. Past the server's own end of the watch, so a watch that ends
normally never times out on the client, while a connection that died silently is noticed 30 s later."""
