"""What the apiserver refuses for good reaches the workflow as a permanent error of the one
enumeration (a 403 after FORBIDDEN_AFTER attempts, 400/422 at once); what may heal is retried. Real
apiserver, real Temporal server, the worker's own interceptor."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from temporalio.client import Client, WorkflowHistoryEventFilterType
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Worker

from devstack.kube import LocalKubeCluster
from devstack.services import TemporalDevServer
from servingops.activities.kubernetes import KubernetesActivities
from servingops.api_models.deckhouse import Model
from servingops.api_models.errors import ErrorType
from servingops.api_models.refs import ObjectRef
from servingops.workers.kubernetes_errors import FORBIDDEN_AFTER, KubernetesErrors, classify
from tests.kube_call_workflow import KubeCall, KubeCallOutcome


@pytest.fixture
def nobody(kube_cluster: LocalKubeCluster) -> Iterator[client.ApiClient]:
    """An ApiClient that acts as a ServiceAccount no role is bound to (admin impersonating it)."""
    api = kube_cluster.api_client()
    api.set_default_header("Impersonate-User", "system:serviceaccount:default:nobody")
    yield api
    api.close()  # type: ignore[no-untyped-call]


async def _attempts(temporal: Client, workflow_id: str) -> int:
    history = await temporal.get_workflow_handle(workflow_id).fetch_history(
        event_filter_type=WorkflowHistoryEventFilterType.ALL_EVENT)
    started = [e for e in history.events if e.HasField("activity_task_started_event_attributes")]
    return max(e.activity_task_started_event_attributes.attempt for e in started)


@pytest.mark.integration
async def test_forbidden_is_permanent_after_a_few_attempts(nobody: client.ApiClient,
                                                        temporal_server: TemporalDevServer) -> None:
    temporal = await Client.connect(temporal_server.address, data_converter=pydantic_data_converter)
    queue = f"kube-errors-{uuid.uuid4().hex[:6]}"
    ref = ObjectRef.of(Model, "anything", "default")
    with ThreadPoolExecutor(max_workers=2) as executor:
        async with Worker(temporal, task_queue=queue, workflows=[KubeCall], activity_executor=executor,
                          activities=[KubernetesActivities(nobody).read_object], interceptors=[KubernetesErrors()]):
            workflow_id = f"kube-call-{uuid.uuid4().hex[:6]}"
            outcome = await temporal.execute_workflow(KubeCall.run, ref, id=workflow_id, task_queue=queue,
                                                      result_type=KubeCallOutcome)
    assert outcome.error_type == ErrorType.FORBIDDEN, outcome
    assert outcome.message.startswith("403 Forbidden: ") and "nobody" in outcome.message
    # The KUBE policy retries without bound: ending at exactly FORBIDDEN_AFTER attempts proves the 403
    # became permanent there (the first ones are retried: a restarted apiserver denies until RBAC syncs).
    assert await _attempts(temporal, workflow_id) == FORBIDDEN_AFTER


@pytest.mark.unit
def test_what_may_heal_is_left_to_retry() -> None:
    for status in (401, 404, 409, 429, 500, 503):
        assert classify(ApiException(status=status, reason="x")) is None
    assert classify(ApiException(status=403, reason="Forbidden"), attempt=1) is None
    forbidden = classify(ApiException(status=403, reason="Forbidden"), attempt=FORBIDDEN_AFTER)
    assert forbidden is not None and forbidden.type == ErrorType.FORBIDDEN and forbidden.non_retryable
    invalid = classify(ApiException(status=422, reason="Unprocessable Entity"))
    assert invalid is not None and invalid.type == ErrorType.INVALID_OBJECT and invalid.non_retryable
