"""The names of what serves an InferenceService component: a revision's Deployment and Service,
`<isvc>-<component>-rev-<hash>`, and the component's HTTPRoute, `<isvc>-<component>`. The renderer
names the objects by them, and the rollout workflows name a revision's objects in status by them."""

from __future__ import annotations


def revision_name(isvc: str, component: str, revision: str) -> str:
    return f"{isvc}-{component}-rev-{revision}"


def route_name(isvc: str, component: str) -> str:
    return f"{isvc}-{component}"
