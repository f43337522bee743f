"""A workflow that makes one Kubernetes read with the production options, and reports how it
ended (for tests/test_kubernetes_errors.py). Importable: the sandbox refuses classes from __main__."""

from __future__ import annotations

from pydantic import BaseModel
from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from servingops.activities.kubernetes import KubernetesActivities
    from servingops.api_models.errors import error_message, error_type_of
    from servingops.api_models.refs import ObjectRef
    from servingops.workflows import options


class KubeCallOutcome(BaseModel):
    ok: bool
    error_type: str | None = None
    message: str = ""


@workflow.defn
class KubeCall:
    @workflow.run
    async def run(self, ref: ObjectRef) -> KubeCallOutcome:
        try:
            await workflow.execute_activity_method(KubernetesActivities.read_object, ref, **options.KUBE)
        except ActivityError as exc:
            error_type = error_type_of(exc)
            return KubeCallOutcome(ok=False, error_type=error_type.value if error_type else None,
                                   message=error_message(exc))
        return KubeCallOutcome(ok=True)
