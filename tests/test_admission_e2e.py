"""The validating admission webhook against the session's real apiserver: `servingops admission` as a process
under the chart's `admission` ServiceAccount, on loopback TLS, registered with the chart's own
ValidatingWebhookConfiguration (rules, matchConditions, objectSelector, timeout, failure policy) pointed at it
(devstack/admission.py). The registration is narrowed to AcceleratorQuotas labelled for this test, so no other
test's tree reaches it (the controller's own e2e tests build violating trees on purpose).

Shown on the real apiserver, writes made as the admin (a user): a valid tree is admitted node by node; a child
over its parent's budget, a cycle, a second root, an unknown parent and a leaf as parent are refused at write
time with the rule in the message, and nothing of a refused write is stored; a pinned runtimeRef on an
InferenceReplica is refused too, by the CRD's own rule (the webhook is not asked: docs/admission.md); with the
webhook process stopped, a write is admitted (failurePolicy Ignore), so a webhook that is down wedges nothing.

No worker, no bridge: admission happens before any of them sees the object. The drained-leaf guard is not shown
here (see the comment where it was): the session cluster may run Kueue, which rewrites a ClusterQueue's counts.
Cost: about 5 s (the process's start, ~15 writes, the chart rendered once).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from devstack import admission as local_admission
from devstack.identities import Identities
from devstack.kube import LocalKubeCluster
from servingops.api_models.ome.accelerator_quota import AcceleratorQuota
from servingops.api_models.ome.replica import InferenceReplica
from tests.crd_helpers import create, manifest, new_namespace, rejection
from tests.support.cleanup import ignore_404

pytestmark = pytest.mark.e2e

GROUP, VERSION, PLURAL = "ome.io", "v1beta1", "acceleratorquotas"
KUEUE = ("kueue.x-k8s.io", "v1beta2")
TEST_LABEL = "servingops.io/admission-test"
DENIED = 'admission webhook "acceleratorquotas.admission.servingops.io" denied the request'


class Tree:
    """This test's AcceleratorQuotas, named with a token, labelled for the registration, removed afterwards."""

    def __init__(self, api: client.ApiClient) -> None:
        self.token = uuid.uuid4().hex[:6]
        self.custom = client.CustomObjectsApi(api)
        self.made: list[str] = []

    def name(self, short: str) -> str:
        return f"adm-{self.token}-{short}"

    def body(self, short: str, role: str = "Cohort", parent: str | None = None,
             gpus: int | None = None) -> dict[str, Any]:
        spec: dict[str, Any] = {"role": role}
        if parent:
            spec["parentRef"] = {"name": self.name(parent)}
        if gpus is not None:
            spec["budgets"] = [{"resourceName": "nvidia.com/gpu", "resourceFlavor": "a100", "nominal": str(gpus)}]
        body = manifest(AcceleratorQuota, spec, self.name(short))
        body["metadata"]["labels"] = {TEST_LABEL: self.token}
        return body

    def create(self, short: str, role: str = "Cohort", parent: str | None = None,
               gpus: int | None = None) -> dict[str, Any]:
        created = create(self.custom.api_client, AcceleratorQuota, self.body(short, role, parent, gpus))
        self.made.append(created["metadata"]["name"])
        return created

    def get(self, short: str) -> dict[str, Any] | None:
        try:
            return dict(self.custom.get_cluster_custom_object(GROUP, VERSION, PLURAL, self.name(short)))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def denied(self, write: Any) -> str:
        """Run a write the webhook must refuse; its message as the client gets it."""
        try:
            write()
        except ApiException as exc:
            assert exc.status == 403, f"expected the webhook's 403, got {exc.status}: {exc.body}"
            message = str(json.loads(exc.body)["message"])
            assert message.startswith(DENIED), message
            return message
        raise AssertionError("the apiserver admitted a write that breaks the tree's rules")

    def refused_create(self, short: str, role: str = "Cohort", parent: str | None = None,
                       gpus: int | None = None) -> str:
        message = self.denied(lambda: create(self.custom.api_client, AcceleratorQuota,
                                             self.body(short, role, parent, gpus)))
        assert self.get(short) is None, f"{short} was stored although refused"
        return message

    def remove(self) -> None:
        for name in reversed(self.made):  # children first
            ignore_404(lambda n=name: self.custom.delete_cluster_custom_object(GROUP, VERSION, PLURAL, n))


@pytest.fixture
def tree(kube_api: client.ApiClient) -> Iterator[Tree]:
    roots = [q["metadata"]["name"] for q in client.CustomObjectsApi(kube_api).list_cluster_custom_object(
        GROUP, VERSION, PLURAL)["items"] if not (q.get("spec") or {}).get("parentRef")]
    assert not roots, f"an earlier test left AcceleratorQuota roots behind: {roots}"
    made = Tree(kube_api)
    try:
        yield made
    finally:
        made.remove()


def test_the_webhook_refuses_what_breaks_the_tree_at_write_time_and_a_down_webhook_wedges_nothing(
        kube_cluster: LocalKubeCluster, kube_api: client.ApiClient, chart_identities: Identities, tree: Tree,
        tmp_path: Path) -> None:
    assert chart_identities.admission is not None
    custom = client.CustomObjectsApi(kube_api)
    queue_name = tree.name("team-a")
    namespace = new_namespace(kube_api, "admission")
    try:
        with local_admission.running(kube_api, chart_identities.admission, tmp_path / "admission",
                                     kube_cluster.log_dir, name=f"servingops-admission-{tree.token}",
                                     object_labels={TEST_LABEL: tree.token}) as webhook:
            # A valid tree, node by node: root (8) > grp (4) > team-a (2), team-b (2).
            tree.create("root", gpus=8)
            tree.create("grp", parent="root", gpus=4)
            tree.create("team-a", "ClusterQueue", "grp", 2)
            tree.create("team-b", "ClusterQueue", "grp", 2)

            message = tree.refused_create("team-c", "ClusterQueue", "grp", 1)
            assert "ContainmentViolated" in message
            assert f"{tree.name('grp')}'s budget for nvidia.com/gpu on a100 is 4, below its children's sum 5" \
                in message

            message = tree.refused_create("root-2", gpus=1)
            assert f"NodeKindInvalid: {tree.name('root')} is already the tree's root" in message

            message = tree.refused_create("team-d", "ClusterQueue", "nowhere", 1)
            assert f"ParentMissing: parentRef {tree.name('nowhere')} names no AcceleratorQuota" in message

            message = tree.refused_create("team-e", "ClusterQueue", "team-a", 1)
            assert f"NodeKindInvalid: parent {tree.name('team-a')} is a leaf" in message

            # A cycle by update: grp under its own child grp-2. The stored grp is as it was.
            tree.create("grp-2", parent="grp")
            grp = tree.get("grp")
            assert grp is not None
            looped = {**grp, "spec": {**grp["spec"], "parentRef": {"name": tree.name("grp-2")}}}
            message = tree.denied(lambda: custom.replace_cluster_custom_object(GROUP, VERSION, PLURAL,
                                                                                tree.name("grp"), looped))
            assert f"ParentCycle: the parentRef chain loops: {tree.name('grp')} -> {tree.name('grp-2')} -> " \
                   f"{tree.name('grp')}" in message
            after = tree.get("grp")
            assert after is not None and after["metadata"]["resourceVersion"] == grp["metadata"]["resourceVersion"]
            assert after["spec"]["parentRef"] == {"name": tree.name("root")}

            # The drained-leaf guard (a leaf whose ClusterQueue holds work turned grouping) is not shown here: it
            # reads the ClusterQueue's admitted counts, which the session cluster's Kueue (started by other modules
            # of the same xdist worker) rewrites from the real workloads, so a status the test writes does not stay
            # (it failed in the full suite that way). tests/test_admission_rules.py holds the rule;
            # tests/test_accelerator_quota_e2e.py shows the controller's RoleChangeBlocked on the real Kueue.

            # Checked where the CRD can: a pinned runtimeRef is the schema's refusal (422), not the webhook's.
            pinned = manifest(InferenceReplica, {"component": "engine", "runtimeRef": {"name": "r", "autoSync": False}})
            assert "runtimeRef cannot pin a revision on an InferenceReplica" in rejection(
                lambda: create(kube_api, InferenceReplica, pinned, namespace))

            # A webhook that is down admits (failurePolicy Ignore): the controller is the authority.
            webhook.stop()
            tree.create("team-c", "ClusterQueue", "grp", 1)
            assert tree.get("team-c") is not None
    finally:
        ignore_404(lambda: custom.delete_cluster_custom_object(*KUEUE, "clusterqueues", queue_name))
        ignore_404(lambda: client.CoreV1Api(kube_api).delete_namespace(namespace))
