"""Registry credentials from a Kubernetes Secret's data, however the Secret reaches the process.

The worker reads the Secret through the API (activities/oci/activities.py, `kubernetes_secret_credentials`);
the node agent gets the same Secret mounted as files (agents/settings.py). Both hand the decoded data here.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping

import oras.utils

from servingops.clients.oci.registry_client import RegistryCredentials


def credentials_from_secret_data(data: Mapping[str, str], registry: str) -> RegistryCredentials | None:
    """Credentials for `registry` from a Secret's decoded data.

    Understands `kubernetes.io/dockerconfigjson` (`.dockerconfigjson`), the legacy `.dockercfg`
    and `kubernetes.io/basic-auth` (`username`, `password`).
    """
    raw = data.get(".dockerconfigjson") or data.get(".dockercfg")
    if raw:
        config = json.loads(raw)
        auths = config.get("auths", config) if ".dockerconfigjson" in data else config
        wanted = set(oras.utils.iter_localhosts(registry))
        for key, entry in auths.items():
            host = key.split("://", 1)[-1].split("/", 1)[0]
            if host not in wanted or not isinstance(entry, dict):
                continue
            if entry.get("username") and entry.get("password"):
                return RegistryCredentials(entry["username"], entry["password"])
            if entry.get("auth"):
                user, _, password = base64.b64decode(entry["auth"]).decode("utf-8").partition(":")
                return RegistryCredentials(user, password)
        return None
    if data.get("username") and data.get("password"):
        return RegistryCredentials(data["username"], data["password"])
    return None
