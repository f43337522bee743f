"""Which HTTP headers carry credentials: the one rule admission (CEL), the operator ConfigMap and
the worker apply to Prometheus `headers`.

Headers are written in a spec or a ConfigMap, so they are stored in etcd in the clear, copied into
workflow payloads (the run's plan, every analysis sample's input) and shown in
`status.rollout.activeRun.plan`. A credential belongs in a Secret named by `authRef` (or a metric
provider's `authSecretRef`), which only the activity that sends the query reads.

The rule, case-insensitive, deliberately broad (a false refusal costs a rename, a leak costs a
rotated credential):

- a header NAME containing auth, token, secret, passw, cookie, credential, session, signature,
  bearer, jwt or key (Authorization, Proxy-Authorization, Cookie, X-Api-Key, X-Auth-Token,
  Ocp-Apim-Subscription-Key, X-Amz-Security-Token, ...);
- a header VALUE that starts with an HTTP authentication scheme followed by a credential
  ("Bearer abc", "Basic dXNlcjpwdw==", "Digest ...", "Negotiate ...", "ApiKey ...", "Token ...").

Tenant and routing headers such as X-Scope-OrgID stay allowed. A serverAddress with user
information (`https://user:password@host`) is refused for the same reason.
"""

from __future__ import annotations

import re
from typing import Any

NAME_PATTERN = r"(?i)(auth|token|secret|passw|cookie|credential|session|signature|bearer|jwt|key)"
"""RE2 and Python agree on this pattern; the CEL rules use it verbatim."""
VALUE_PATTERN = r"(?i)^\s*(bearer|basic|digest|negotiate|apikey|token)\s+\S"
USERINFO_PATTERN = r"^[A-Za-z][A-Za-z0-9+.-]*://[^/?#]*@"

MAX_HEADERS = 16
MAX_HEADER_VALUE = 1024
MAX_ADDRESS = 2048

REFUSAL = ("headers must not carry credentials (Authorization, Proxy-Authorization, Cookie, API keys, "
           "tokens, passwords or an auth-scheme value): put the credential in a Secret and name it in "
           "authRef")
ADDRESS_REFUSAL = "serverAddress must not carry credentials (user:password@): put them in a Secret named by authRef"

_NAME = re.compile(NAME_PATTERN)
_VALUE = re.compile(VALUE_PATTERN)
_USERINFO = re.compile(USERINFO_PATTERN)


def credential_header(name: str, value: str) -> bool:
    return bool(_NAME.search(name) or _VALUE.search(value))


def credential_headers(headers: dict[str, str] | None) -> list[str]:
    """The names of the headers that carry credentials, sorted."""
    return sorted(name for name, value in (headers or {}).items() if credential_header(name, value))


def without_credentials(headers: dict[str, str] | None) -> dict[str, str]:
    return {name: value for name, value in (headers or {}).items() if not credential_header(name, value)}


def address_has_userinfo(address: str) -> bool:
    return bool(_USERINFO.match(address))


def without_userinfo(address: str) -> str:
    """`https://user:pw@host/x` -> `https://host/x`."""
    match = _USERINFO.match(address)
    if not match:
        return address
    scheme = address.split("://", 1)[0]
    return f"{scheme}://{address[match.end():]}"


def scrubbed(value: Any) -> Any:
    """`value` (an object as the apiserver returns it) without credentials in any `prometheus` block:
    credential headers dropped, user information taken out of serverAddress. Admission refuses both,
    but an object stored before the rule can still hold them, and what an activity returns is kept in
    workflow history: activities that return specs pass them through here."""
    if isinstance(value, list):
        return [scrubbed(item) for item in value]
    if not isinstance(value, dict):
        return value
    result: dict[str, Any] = {}
    for key, item in value.items():
        if key == "prometheus" and isinstance(item, dict):
            item = dict(item)
            if isinstance(item.get("headers"), dict):
                item["headers"] = without_credentials(item["headers"])
            if isinstance(item.get("serverAddress"), str):
                item["serverAddress"] = without_userinfo(item["serverAddress"])
        result[key] = scrubbed(item)
    return result


def _cel_string(pattern: str) -> str:
    return "'" + pattern.replace("\\", "\\\\").replace("'", "\\'") + "'"


HEADERS_RULE = (f"self.all(k, !k.matches({_cel_string(NAME_PATTERN)}) && "
                f"!self[k].matches({_cel_string(VALUE_PATTERN)}))")
"""The CEL rule on a `headers` map: every name and value passes."""
ADDRESS_RULE = f"!self.matches({_cel_string(USERINFO_PATTERN)})"
