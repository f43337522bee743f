"""Every kind servingops serves, in the order the CRDs are generated and installed."""

from api_models.base import KubeResource
from api_models.deckhouse import DECKHOUSE_KINDS
from api_models.ome import OME_KINDS


def served_kinds() -> list[type[KubeResource]]:
    return [*DECKHOUSE_KINDS, *OME_KINDS]
