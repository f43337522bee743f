"""Every kind servingops serves, in the order the CRDs are generated and installed."""

from servingops.api_models.base import KubeResource
from servingops.api_models.deckhouse import DECKHOUSE_KINDS
from servingops.api_models.ome import OME_KINDS


def served_kinds() -> list[type[KubeResource]]:
    return [*DECKHOUSE_KINDS, *OME_KINDS]
