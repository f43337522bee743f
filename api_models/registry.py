"""Every kind servingops serves, in the order the CRDs are generated and installed."""

from api_models.base import KubeResource
from api_models.deckhouse import DECKHOUSE_KINDS


def served_kinds() -> list[type[KubeResource]]:
    kinds = list(DECKHOUSE_KINDS)
    try:
        from api_models.ome import OME_KINDS
    except ImportError:  # the OME models are being written; drop this guard once they land
        return kinds
    return kinds + list(OME_KINDS)
