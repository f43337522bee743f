"""Does a node satisfy a model's `storage.nodeSelector` and required node affinity? Pure, no I/O.

The semantics are Kubernetes' own for pods (k8s.io/component-helpers/scheduling/corev1/nodeaffinity),
so placement can reuse this module for the same operators:

- nodeSelector: every label equal (an empty or absent selector matches every node);
- requiredDuringSchedulingIgnoredDuringExecution: nodeSelectorTerms are ORed; within a term the
  matchExpressions and matchFields are ANDed; a term with neither matches nothing; an empty list of
  terms matches nothing (as the scheduler has it), an absent `required` matches every node;
- operators In, NotIn, Exists, DoesNotExist, Gt, Lt; Gt/Lt compare the label as an integer and fail
  to match when it is not one; matchFields supports `metadata.name` (In / NotIn) only, as upstream.

Objects are the raw dicts the apiserver returns (camelCase field names), never typed models: the agent
reads kinds whose Python models another package owns.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

NODE_NAME_FIELD = "metadata.name"


class InvalidRequirement(ValueError):
    """A requirement the apiserver should have refused (unknown operator, wrong number of values)."""


def match_expression(expr: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """One NodeSelectorRequirement against a node's labels."""
    key = expr.get("key", "")
    op = expr.get("operator", "")
    values: Sequence[str] = expr.get("values") or []
    present = key in labels
    if op == "In":
        return present and labels[key] in values
    if op == "NotIn":
        return not present or labels[key] not in values
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return not present
    if op in ("Gt", "Lt"):
        if len(values) != 1:
            raise InvalidRequirement(f"{op} on {key!r} needs exactly one value, got {list(values)}")
        try:
            bound = int(values[0])
        except ValueError as exc:
            raise InvalidRequirement(f"{op} on {key!r}: {values[0]!r} is not an integer") from exc
        if not present:
            return False
        try:
            have = int(labels[key])
        except ValueError:
            return False
        return have > bound if op == "Gt" else have < bound
    raise InvalidRequirement(f"unknown operator {op!r} on {key!r}")


def match_field(expr: Mapping[str, Any], node_name: str) -> bool:
    """One matchFields requirement; only `metadata.name` exists for nodes."""
    key = expr.get("key", "")
    if key != NODE_NAME_FIELD:
        raise InvalidRequirement(f"matchFields supports {NODE_NAME_FIELD} only, not {key!r}")
    op = expr.get("operator", "")
    values: Sequence[str] = expr.get("values") or []
    if op == "In":
        return node_name in values
    if op == "NotIn":
        return node_name not in values
    raise InvalidRequirement(f"matchFields supports In and NotIn only, not {op!r}")


def match_term(term: Mapping[str, Any], labels: Mapping[str, str], node_name: str) -> bool:
    """A NodeSelectorTerm: all its requirements; an empty term matches nothing."""
    expressions = term.get("matchExpressions") or []
    fields = term.get("matchFields") or []
    if not expressions and not fields:
        return False
    return (all(match_expression(e, labels) for e in expressions)
            and all(match_field(f, node_name) for f in fields))


def match_node_selector_terms(terms: Sequence[Mapping[str, Any]], labels: Mapping[str, str],
                              node_name: str) -> bool:
    """nodeSelectorTerms: ORed."""
    return any(match_term(term, labels, node_name) for term in terms)


def node_matches(storage: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    """The model's storage spec selects this node (raw Node object)."""
    meta = node.get("metadata") or {}
    labels: Mapping[str, str] = meta.get("labels") or {}
    name: str = meta.get("name", "")
    selector: Mapping[str, str] = storage.get("nodeSelector") or {}
    if any(labels.get(k) != v for k, v in selector.items()):
        return False
    affinity = storage.get("nodeAffinity") or {}
    required = affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    if required is None:
        return True
    return match_node_selector_terms(required.get("nodeSelectorTerms") or [], labels, name)
