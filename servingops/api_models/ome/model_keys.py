"""Names of a model on a node: its Node label key and its report ConfigMap key, as upstream OME spells them.
A contract between the node agent (which writes them) and the renderer (which schedules serving pods on
nodes whose label says Ready), so it lives with the API models.

Ported from upstream OME (pkg/constants/constants.go: GetClusterBaseModelLabel, GetBaseModelLabel,
GetModelConfigMapKey, truncateWithHash), so OME's tooling and users read the same keys:

- Node label `models.ome.io/clusterbasemodel.<name>` or `models.ome.io/<ns>.basemodel.<name>`, value
  Ready / Updating / Failed, removed when the copy goes;
- report ConfigMap named after the node, labelled `models.ome/basemodel-status: "true"`, with the key
  `clusterbasemodel.<name>` or `<ns>.basemodel.<name>`.

Names too long for a label (49 characters after the domain) or a ConfigMap key (253) keep their tail and
gain an 8-hex sha256 prefix. FineTunedWeight (cluster-scoped) has no agent upstream; it follows the
ClusterBaseModel form with the type `finetunedweight`.
"""

from __future__ import annotations

import hashlib
import posixpath
from dataclasses import dataclass
from enum import StrEnum

ARTIFACT_ANNOTATION = "servingops.io/artifact"
"""On a (Cluster)BaseModel / FineTunedWeight: `<registry>/<repository>@sha256:<digest>`, the artifact the
agents copy (written by the delivery workflow; the agents act on nothing else)."""
DEFAULT_MODELS_ROOT = "/mnt/models"
"""Where a model without storage.path is kept on a node (upstream's models root default)."""
LABEL_DOMAIN = "models.ome.io"
STATUS_CONFIGMAP_LABEL = "models.ome/basemodel-status"
MAX_LABEL_NAME_LENGTH = 49  # 63 - len("models.ome.io") - 1
MAX_CONFIGMAP_KEY_LENGTH = 253
HASH_PREFIX_LENGTH = 8
_MIN_NAMESPACE_LENGTH = 8


class ModelKind(StrEnum):
    BASE_MODEL = "BaseModel"
    CLUSTER_BASE_MODEL = "ClusterBaseModel"
    FINE_TUNED_WEIGHT = "FineTunedWeight"

    @property
    def label_type(self) -> str:
        return self.value.lower()

    @property
    def namespaced(self) -> bool:
        return self is ModelKind.BASE_MODEL

    @property
    def plural(self) -> str:
        return self.value.lower() + "s"


GROUP = "ome.io"
VERSION = "v1beta1"


@dataclass(frozen=True, order=True)
class ModelKey:
    kind: ModelKind
    namespace: str
    """"" for the cluster-scoped kinds."""
    name: str

    def __str__(self) -> str:
        return f"{self.kind.value} {self.namespace}/{self.name}" if self.namespace else f"{self.kind.value} {self.name}"

    @property
    def label_key(self) -> str:
        return f"{LABEL_DOMAIN}/{_scoped_name(self, MAX_LABEL_NAME_LENGTH)}"

    @property
    def configmap_key(self) -> str:
        return _scoped_name(self, MAX_CONFIGMAP_KEY_LENGTH)

    def copy_path(self, storage_path: str | None) -> str:
        """Where the node's copy lives: storage.path, else a path of its own under the models root."""
        return storage_path or posixpath.join(DEFAULT_MODELS_ROOT, self.configmap_key)


def truncate_with_hash(original: str, max_length: int) -> str:
    """`original` if it fits, else `<8 hex of its sha256>-<its tail>` of exactly max_length."""
    if len(original) <= max_length:
        return original
    prefix = hashlib.sha256(original.encode()).hexdigest()[:HASH_PREFIX_LENGTH]
    suffix_length = max_length - HASH_PREFIX_LENGTH - 1
    if suffix_length <= 0:
        return prefix[:max_length]
    return f"{prefix}-{original[len(original) - suffix_length:]}"


def _scoped_name(key: ModelKey, max_length: int) -> str:
    kind = key.kind.label_type
    if not key.kind.namespaced:
        return f"{kind}.{truncate_with_hash(key.name, max_length - len(kind) - 1)}"
    available = max_length - (len(kind) + 1) - 1
    ns, name = key.namespace, key.name
    if len(ns) + len(name) <= available:
        return f"{ns}.{kind}.{name}"
    if available < _MIN_NAMESPACE_LENGTH * 2:
        ns_max = available // 2
    else:
        ns_max = len(ns) if len(ns) <= _MIN_NAMESPACE_LENGTH else _MIN_NAMESPACE_LENGTH
    name_max = available - ns_max
    return f"{truncate_with_hash(ns, ns_max)}.{kind}.{truncate_with_hash(name, name_max)}"
