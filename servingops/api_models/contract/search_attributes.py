"""The custom search attributes every servingops workflow sets, so the Temporal UI can list
"every rollout in namespace X that is Paused" without opening a single workflow.

Part of the contract: the workflows publish them (workflows/visibility.py), the bridge sets the first
three on a start, the worker's metrics read the phase, and the local stack registers them all with
Temporal; none of those has to import the workflows for four names."""

from temporalio.common import SearchAttributeKey

KIND = SearchAttributeKey.for_keyword("ServingopsKind")
NAMESPACE = SearchAttributeKey.for_keyword("ServingopsNamespace")
NAME = SearchAttributeKey.for_keyword("ServingopsName")
PHASE = SearchAttributeKey.for_keyword("ServingopsPhase")

ALL = (KIND, NAMESPACE, NAME, PHASE)
