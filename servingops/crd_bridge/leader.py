"""One active bridge among replicas, elected through a coordination.k8s.io Lease.

Uses the official client's leaderelection package (LeaseLock), which does the acquire / renew
loop the way client-go does. A replica that loses its lease exits at once, like a
controller-runtime manager: a restart re-enters as a follower, and nothing half-done is kept.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable

from kubernetes import client
from kubernetes.leaderelection import electionconfig, leaderelection
from kubernetes.leaderelection.resourcelock.leaselock import LeaseLock

log = logging.getLogger("servingops.bridge.leader")
# The library logs every renewal at INFO.
logging.getLogger("leaderelection").setLevel(logging.WARNING)


def start_election(api_client: client.ApiClient, *, name: str, namespace: str, identity: str,
                   on_leading: Callable[[], None], stopping: threading.Event,
                   lease_seconds: int = 15, renew_seconds: int = 10, retry_seconds: int = 2) -> threading.Thread:
    lock = LeaseLock(name, namespace, identity)  # type: ignore[no-untyped-call]
    lock.api_instance = client.CoordinationV1Api(api_client)  # the lock builds one from the default config

    def lead() -> None:
        log.info("%s is the leader", identity)
        on_leading()
        stopping.wait()  # returning would make the library stop renewing

    def lost() -> None:
        if stopping.is_set():
            return
        log.error("%s lost the lease; exiting so that a restart rejoins as a follower", identity)
        os._exit(3)

    config = electionconfig.Config(  # type: ignore[no-untyped-call]
        lock, lease_seconds, renew_seconds, retry_seconds, lead, lost)
    election = leaderelection.LeaderElection(config)  # type: ignore[no-untyped-call]
    thread = threading.Thread(target=election.run, name="leader-election", daemon=True)
    thread.start()
    return thread
