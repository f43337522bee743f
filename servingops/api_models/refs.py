"""References to Kubernetes objects, as carried in workflow and activity payloads.

A reference, never a copy: workflows re-read the object through an activity when they act.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from servingops.api_models.base import KubeResource


class ObjectRef(BaseModel):
    """Enough to address one object of a served kind through the API."""

    model_config = ConfigDict(frozen=True)

    group: str
    version: str
    plural: str
    kind: str
    name: str
    namespace: str | None = None
    uid: str | None = None
    """When set, writes are refused if the live object has another uid (the name was reused)."""

    @classmethod
    def of(cls, kind: type[KubeResource], name: str, namespace: str | None = None,
           uid: str | None = None) -> ObjectRef:
        info = kind.crd
        return cls(group=info.group, version=info.version, plural=info.plural, kind=info.kind,
                   name=name, namespace=namespace, uid=uid)

    def describe(self) -> str:
        where = f"{self.namespace}/" if self.namespace else ""
        return f"{self.kind} {where}{self.name}"


class ConditionUpdate(BaseModel):
    """A condition as a workflow decides it; the activity stamps lastTransitionTime."""

    type: str
    status: str
    reason: str
    message: str = ""
