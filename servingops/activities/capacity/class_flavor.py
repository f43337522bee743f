"""An AcceleratorClass and the Kueue ResourceFlavor its `integration.kueueResourceFlavor` names, pure.

Syncing, as chosen here (upstream OME stores the name and does nothing with it): the class is the source
of the flavor's node labels. When the named flavor does not exist and the class's discovery has a
nodeSelector, the workflow creates the flavor with `spec.nodeLabels` = that nodeSelector (labelled
managed-by servingops, annotated with the class); an existing flavor is never changed (it may be an
administrator's, or the quota tree's), only compared. The KueueResourceFlavorSynced condition says which:
- True `FlavorMatches`: the flavor's nodeLabels equal the class's nodeSelector (Kueue then places the
  class's workloads on exactly the class's nodes);
- False `FlavorNodeLabelsDiffer`: it exists with other nodeLabels (named in the message);
- False `FlavorNeedsNodeSelector`: it does not exist and the class has no nodeSelector to give it (an
  affinity or PCI ids cannot be written as nodeLabels);
- False `KueueNotServed`: the cluster serves no ResourceFlavor kind;
- False `FlavorCreateRefused`: the apiserver refused the create (a 403: the worker's role lacks it, or a 422),
  in its words; tried again at the next sample.
A class that names no flavor has no such condition.
"""

from __future__ import annotations

from pydantic import BaseModel

from servingops.api_models.refs import ConditionUpdate

FLAVOR_CONDITION = "KueueResourceFlavorSynced"


class FlavorReason:
    MATCHES = "FlavorMatches"
    DIFFER = "FlavorNodeLabelsDiffer"
    NEEDS_SELECTOR = "FlavorNeedsNodeSelector"
    NOT_SERVED = "KueueNotServed"
    REFUSED = "FlavorCreateRefused"


class FlavorState(BaseModel):
    """What observe saw of the named flavor."""

    name: str
    desired_labels: dict[str, str] = {}
    """The class's discovery.nodeSelector: what the flavor's nodeLabels should be."""
    exists: bool = False
    node_labels: dict[str, str] = {}
    """The flavor's spec.nodeLabels, when it exists."""
    served: bool = True
    """False when the cluster serves no Kueue ResourceFlavor kind."""
    refused: str = ""
    """The apiserver's refusal of this sample's create."""


def should_create(flavor: FlavorState) -> bool:
    return flavor.served and not flavor.exists and bool(flavor.desired_labels)


def flavor_condition(flavor: FlavorState) -> ConditionUpdate:
    def condition(ok: bool, reason: str, message: str) -> ConditionUpdate:
        return ConditionUpdate(type=FLAVOR_CONDITION, status="True" if ok else "False", reason=reason,
                               message=message)

    if not flavor.served:
        return condition(False, FlavorReason.NOT_SERVED, "the cluster serves no kueue.x-k8s.io ResourceFlavor")
    if flavor.refused and not flavor.exists:
        return condition(False, FlavorReason.REFUSED,
                         f"ResourceFlavor {flavor.name} could not be created: {flavor.refused}"[:1000])
    if not flavor.exists:
        return condition(False, FlavorReason.NEEDS_SELECTOR,
                         f"ResourceFlavor {flavor.name} does not exist and spec.discovery has no nodeSelector "
                         "to create it from")
    if flavor.node_labels != flavor.desired_labels:
        return condition(False, FlavorReason.DIFFER,
                         f"ResourceFlavor {flavor.name} selects nodeLabels {dict(sorted(flavor.node_labels.items()))}, "
                         f"the class {dict(sorted(flavor.desired_labels.items()))}")
    return condition(True, FlavorReason.MATCHES, f"ResourceFlavor {flavor.name} selects the class's nodes")


__all__ = ["FLAVOR_CONDITION", "FlavorReason", "FlavorState", "flavor_condition", "should_create"]
