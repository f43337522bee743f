"""One AdmissionReview v1 and its answer, pure given a `TreeReader` (the apiserver's in `reader`, a list in tests).

Only an AcceleratorQuota CREATE or UPDATE whose spec changed is judged; anything else is admitted as it is (the
chart's rules and matchConditions keep it from being sent at all). A refusal answers allowed=false, code 403,
reason Forbidden and a message naming each rule broken by its controller reason; the apiserver hands that message
to `kubectl apply` and to the client's create or update. A tree that cannot be read is admitted with a warning:
the webhook's failure policy is Ignore (the controller is the authority and re-checks at reconcile), and an
answer of its own says the same to the user.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from pydantic import ValidationError

from servingops.admission.quota_tree import (
    candidate_node,
    role_change_refusal,
    tree_refusals,
    turns_leaf_into_grouping,
)
from servingops.rendering.accelerator_quota import DEFAULT_MAX_DEPTH, ClusterQueueView, QuotaNode

QUOTA_GROUP, QUOTA_KIND = "ome.io", "AcceleratorQuota"
API_VERSION = "admission.k8s.io/v1"


class ReadFailed(Exception):
    """The tree or a ClusterQueue could not be read (not: it is absent)."""


class TreeReader(Protocol):
    def quotas(self) -> list[Mapping[str, Any]]:
        """Every AcceleratorQuota as stored."""

    def cluster_queue(self, name: str) -> Mapping[str, Any] | None:
        """The Kueue ClusterQueue of that name, or None (absent, or Kueue not served)."""


def answer(uid: str, *, refused: str | None = None, warnings: list[str] | None = None) -> dict[str, Any]:
    response: dict[str, Any] = {"uid": uid, "allowed": refused is None}
    if refused is not None:
        response["status"] = {"code": 403, "reason": "Forbidden", "message": refused}
    if warnings:
        response["warnings"] = warnings
    return {"apiVersion": API_VERSION, "kind": "AdmissionReview", "response": response}


def review(body: Mapping[str, Any], reader: TreeReader, *, max_depth: int = DEFAULT_MAX_DEPTH) -> dict[str, Any]:
    """The AdmissionReview answering `body`."""
    request = body.get("request") or {}
    uid = str(request.get("uid", ""))
    kind = request.get("kind") or {}
    obj, old_obj = request.get("object") or {}, request.get("oldObject") or None
    if (kind.get("group"), kind.get("kind")) != (QUOTA_GROUP, QUOTA_KIND) or \
            request.get("operation") not in ("CREATE", "UPDATE") or request.get("subResource"):
        return answer(uid)
    if old_obj is not None and old_obj.get("spec") == obj.get("spec"):
        return answer(uid)  # a label, an annotation, a finalizer: the tree is as it was
    name = str((obj.get("metadata") or {}).get("name", ""))
    try:
        candidate = candidate_node(obj)
        old = QuotaNode.from_object(old_obj) if old_obj is not None else None
    except (ValidationError, ValueError) as exc:
        # The CRD schema admitted it; a shape the rules cannot read is the controller's to report.
        return answer(uid, warnings=[f"the AcceleratorQuota tree rules could not read {name}: {exc}"])
    try:
        stored = [QuotaNode.from_object(q) for q in reader.quotas()]
        refusals = tree_refusals(candidate, old, stored, max_depth=max_depth)
        if turns_leaf_into_grouping(candidate, old):
            found = reader.cluster_queue(candidate.name)
            queue = None if found is None else ClusterQueueView.from_object(found, candidate.name)
            guard = role_change_refusal(candidate, old, queue)
            if guard is not None:
                refusals.append(guard)
    except ReadFailed as exc:
        return answer(uid, warnings=[f"AcceleratorQuota tree not checked at admission ({exc}); the controller "
                                     "checks it at reconcile"])
    if not refusals:
        return answer(uid)
    rules = "; ".join(r.text(name) for r in refusals)
    return answer(uid, refused=f"AcceleratorQuota {name} breaks the tree's rules: {rules}")
