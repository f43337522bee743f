"""One probe of a member cluster's apiserver: is it there, and do our credentials work there.

Three short requests, each with REQUEST_TIMEOUT:

1. GET /readyz: the apiserver answers and says it can serve (its etcd and informers are up).
2. GET /version: the server version, shown in the Ready message.
3. POST a SelfSubjectReview (authentication.k8s.io/v1): who the apiserver takes us for.

Why a SelfSubjectReview and not "list namespaces, limit 1": /readyz and /version are open to
anonymous callers, so they prove nothing about the credentials; a SelfSubjectReview is allowed to
every authenticated user by the built-in `system:basic-user` role and to no anonymous one, so it
proves the credentials authenticate while needing no grant at all. A least-privilege identity
(one that may only touch the namespaces placement uses) passes it; listing namespaces would
demand a cluster-wide right the member's identity has no other use for. Its answer (the
username) goes in the message; a ServiceAccount's name is not a secret.

The outcome is data, never an exception: an unreachable member is a normal answer.
"""

from __future__ import annotations

import json
import socket
import ssl
from typing import Any

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from servingops.activities.workload_cluster.kubeconfig import MemberAccess, api_client
from servingops.api_models.contract.workload_cluster import ConnectionReason, ConnectionVerdict

REQUEST_TIMEOUT = (3.0, 5.0)
"""(connect, read) seconds per request: a member that takes longer is Unreachable for this probe."""


def _cause(exc: BaseException) -> str:
    """The root of a transport failure, in a few words (no URL query, no header)."""
    seen: BaseException = exc
    while True:
        inner = getattr(seen, "reason", None) if isinstance(seen, urllib3.exceptions.MaxRetryError) else None
        inner = inner or seen.__cause__ or seen.__context__
        if inner is None or inner is seen or not isinstance(inner, BaseException):
            break
        seen = inner
    if isinstance(seen, ssl.SSLCertVerificationError):
        return f"TLS verification failed: {seen.verify_message}"
    if isinstance(seen, ssl.SSLError | urllib3.exceptions.SSLError):
        return f"TLS failure: {seen}"
    if isinstance(seen, ConnectionRefusedError):
        return "connection refused"
    if isinstance(seen, TimeoutError | socket.timeout | urllib3.exceptions.TimeoutError):
        return "timed out"
    text = str(seen).split(": ", 1)[-1] if ": " in str(seen) else str(seen)
    return f"{type(seen).__name__}: {text}"[:300]


def _unreachable(server: str, why: str) -> ConnectionVerdict:
    return ConnectionVerdict(connected=False, reason=ConnectionReason.UNREACHABLE,
                             message=f"{server}: {why}")


def _refused(server: str, status: int, what: str) -> ConnectionVerdict:
    return ConnectionVerdict(connected=False, reason=ConnectionReason.UNAUTHORIZED,
                             message=f"{server} answered {status} to {what}: the kubeconfig's credentials "
                                     f"are {'not accepted' if status == 401 else 'not allowed to ' + what}")


def _request(api: client.ApiClient, method: str, path: str, body: dict[str, Any] | None = None) -> tuple[int, bytes]:
    """(status, body) of one request to the member, through the ApiClient's auth and TLS. Raw
    requests rather than the generated API classes: these calls go to the member as the
    kubeconfig's identity, not to the control plane as the worker's (tests/rbac_calls.py reads the
    generated classes' calls as the worker's)."""
    params = api.param_serialize(method=method, resource_path=path, body=body, auth_settings=["BearerToken"],
                                 header_params={"Accept": "application/json", "Content-Type": "application/json"})
    response = api.call_api(*params, _request_timeout=REQUEST_TIMEOUT)
    response.read()  # type: ignore[no-untyped-call]
    return int(response.status), bytes(response.data or b"")


def _json(data: bytes) -> dict[str, Any]:
    try:
        value = json.loads(data)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def probe(access: MemberAccess) -> ConnectionVerdict:
    server = access.server
    api = api_client(access)
    try:
        answers: dict[str, bytes] = {}
        for step, method, path, body in (
            ("GET /readyz", "GET", "/readyz", None),
            ("GET /version", "GET", "/version", None),
            ("create selfsubjectreviews", "POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews",
             {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}),
        ):
            try:
                status, data = _request(api, method, path, body)
            except ApiException as exc:  # some client versions raise on a non-2xx answer
                status, data = int(exc.status or 0), (exc.body or "").encode()
            except (urllib3.exceptions.HTTPError, OSError) as exc:
                return _unreachable(server, f"{step}: {_cause(exc)}")
            if status in (401, 403):
                return _refused(server, status, step)
            if status == 404 and path.endswith("selfsubjectreviews"):
                return _unreachable(server, "the apiserver does not serve authentication.k8s.io/v1 "
                                            "SelfSubjectReview (Kubernetes 1.28 or later is needed to prove the "
                                            "credentials)")
            if not 200 <= status < 300:
                if path == "/readyz":
                    failed = [line.strip() for line in data.decode(errors="replace").splitlines()
                              if line.strip().startswith("[-]")]
                    return _unreachable(server, f"the apiserver is not ready ({'; '.join(failed[:5]) or status})")
                return _unreachable(server, f"{step} answered {status}")
            answers[path] = data
        version = _json(answers["/version"]).get("gitVersion")
        review = _json(answers["/apis/authentication.k8s.io/v1/selfsubjectreviews"])
        user = ((review.get("status") or {}).get("userInfo") or {}).get("username")
        return ConnectionVerdict(connected=True, reason=ConnectionReason.CONNECTED,
                                 server_version=str(version) if version else None,
                                 message=f"{server} is ready, Kubernetes {version}, authenticated as {user}")
    finally:
        api.close()  # type: ignore[no-untyped-call]


__all__ = ["REQUEST_TIMEOUT", "probe"]
