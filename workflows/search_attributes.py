"""The custom search attributes every servingops workflow sets, so the Temporal UI can list
"every rollout in namespace X that is Paused" without opening a single workflow."""

from temporalio.common import SearchAttributeKey

KIND = SearchAttributeKey.for_keyword("ServingopsKind")
NAMESPACE = SearchAttributeKey.for_keyword("ServingopsNamespace")
NAME = SearchAttributeKey.for_keyword("ServingopsName")
PHASE = SearchAttributeKey.for_keyword("ServingopsPhase")

ALL = (KIND, NAMESPACE, NAME, PHASE)
