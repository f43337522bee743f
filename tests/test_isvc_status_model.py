"""The InferenceService status is built through its model (`InferenceServiceStatus`, seed 004) and
written as the same merge patch as when it was assembled as a dict.

Each case is a representative memory of the InferenceService workflow with what its status write
adds beside that memory (mounted overlays, modelStatus, the runtime pin). Its expected patch is what
the dict-built path (workflows/rollout/status.py and InferenceServiceWorkflow._write_status at commit
60cc8b7) produced for it, recorded once and pasted here: users read these fields, so the move to the
model changes no byte of them."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest

from servingops.activities.serving.types import ServingHold
from servingops.api_models.contract.rollout import (
    ActiveRun,
    ComponentTarget,
    ComponentView,
    PinnedGroup,
    ServiceState,
)
from servingops.api_models.errors import ErrorType
from servingops.api_models.ome.enums import (
    CanaryFailureReason,
    ComponentType,
    CoordinationPhase,
    CoordinationPolicy,
    MigrationMode,
    MigrationPhase,
    RolloutPlanSource,
    RolloutProgressionKind,
    RolloutRunOutcome,
)
from servingops.api_models.ome.inference_service import InferenceServiceStatus
from servingops.api_models.ome.migration import MigrationEvent, MigrationHistoryEntry
from servingops.api_models.ome.model_status import MountedOverlay
from servingops.api_models.ome.rollout import (
    GroupBlueGreen,
    GroupCanary,
    RolloutGroup,
    RolloutGroupStep,
    RolloutPolicyRef,
)
from servingops.api_models.ome.rollout_status import (
    CanaryFailure,
    CanaryStatus,
    RolloutCoordinationGroupStatus,
    RolloutGroupResolution,
    ShadowedRolloutPolicyRef,
)
from servingops.api_models.serving import IngressObservation, RouteStatus, TrafficWeight
from servingops.workflows.rollout import status
from servingops.workflows.rollout.models import Refusal

pytestmark = pytest.mark.unit

ISVC = "llama"
NOW = datetime(2026, 12, 5, 10, 0, 0, tzinfo=UTC)
OPENED = datetime(2026, 12, 5, 9, 30, 0, 123000, tzinfo=UTC)
ENGINE, DECODER, ROUTER = ComponentType.ENGINE, ComponentType.DECODER, ComponentType.ROUTER
GATEWAY = IngressObservation(gateway="ingress/public", url="http://llama.team-a.example.test")


@dataclass
class Case:
    """A memory of the InferenceService workflow and what its status write adds beside it."""

    state: ServiceState
    overlays: tuple[list[dict[str, object]], list[str]] = ([], [])
    """(mounted, skipped), as serving.observe reports them."""
    model: dict[str, Any] | None = None
    """status.model_status's arguments for a service that serves by reference; None: it does not."""
    pin: tuple[str | None, str | None] | None = None
    """(pinnedRevisionName, lastRuntimeSyncToken) when the workflow writes them (a pin moved or dropped)."""


def _canary_group(policy: str | None = None) -> RolloutGroup:
    return RolloutGroup(components=[ENGINE, ROUTER], canary=GroupCanary(steps=[
        RolloutGroupStep(capacity="50%", traffic=10), RolloutGroupStep(capacity="100%", traffic=50)]),
        policy_ref=RolloutPolicyRef(name=policy, progression=RolloutProgressionKind.CANARY) if policy else None)


def _run(key: str, index: int | None, targets: list[ComponentTarget], group: RolloutGroup,
         source: RolloutPlanSource = RolloutPlanSource.INLINE) -> ActiveRun:
    # policy_ref is left without its kind, as a spec that omits it parses: the status has always
    # written the default ("RolloutPolicy") there.
    return ActiveRun(key=key, workflow_id=f"rollout/team-a/{ISVC}/uid-1/{key}", run_id=f"uid-1-{key}",
                     targets=targets, opened_at=OPENED,
                     pinned=PinnedGroup(key=key, index=index, group=group, source=source,
                                        policy_ref=group.policy_ref, policy_generation=4 if group.policy_ref else None,
                                        portable_digest=f"sha256:{key}"))


def _canary_behind_a_gateway() -> Case:
    """Engine and router canarying together behind a Gateway: a split with a zero-weight backend, the
    entrypoint's canary mirrored to status.canary, two runs, the last run and the groups' resolutions;
    served by reference with overlays mounted and a runtime pin."""
    canary = CanaryStatus(target_id="t-1", canary_revision_hash="r2", stable_revision_hash="r1", current_step=1,
                          step_entered_time=OPENED, observed_traffic_weight=10, pre_step_hold=False,
                          analysis_failed_checks=None, promoted_through="r2",
                          failed=CanaryFailure(reason=CanaryFailureReason.CAPACITY_TIMEOUT, time=NOW))
    route = RouteStatus(route="llama-router", generation=2, reported=True, accepted=True, resolved_refs=True,
                        observed_generation=2, current=True)
    split = [TrafficWeight(revision="r1", weight=90), TrafficWeight(revision="r2", weight=10),
             TrafficWeight(revision="r0", weight=0)]
    components = {
        ENGINE: ComponentView(url="http://llama-engine.team-a.svc.cluster.local",
                              address="http://llama-engine.team-a.svc.cluster.local", stable="e1", previous="e0",
                              latest_ready="e2", traffic=[TrafficWeight(revision="e1", weight=90),
                                                          TrafficWeight(revision="e2", weight=10)],
                              rollout_phase="Canarying", serving_ready=True, desired="e2"),
        ROUTER: ComponentView(url="http://llama.team-a.example.test", address="http://llama-router.team-a.svc.cluster.local",
                              route_status=route, stable="r1", latest_ready="r2", traffic=split, canary=canary,
                              rollout_phase="Paused", serving_ready=True, desired="r2"),
    }
    targets = [ComponentTarget(component=ENGINE, revision="e2", stable_revision="e1", desired_replicas=2),
               ComponentTarget(component=ROUTER, revision="r2", stable_revision="r1", desired_replicas=1)]
    closed = _run("0", 0, targets, _canary_group())
    resolutions = [
        RolloutGroupResolution(index=0, source=RolloutPlanSource.INLINE,
                               policy_ref=RolloutPolicyRef(name="fast", progression=RolloutProgressionKind.CANARY),
                               observed_digest="sha256:0",
                               shadowed_policy_ref=ShadowedRolloutPolicyRef(name="fast", would_pin_digest="sha256:p"))
        .to_api(),
        RolloutGroupResolution(index=1, source=RolloutPlanSource.POLICY, observed_digest="sha256:1").to_api(),
    ]
    state = ServiceState(
        generation=7, components=components,
        active={"1": _run("1", 1, targets, _canary_group("fast"), RolloutPlanSource.POLICY),
                "decoder": _run("decoder", None, [], RolloutGroup(components=[DECODER], blue_green=GroupBlueGreen()))},
        resolutions=resolutions, last_run=status.run_record(closed, RolloutRunOutcome.SUPERSEDED, NOW),
        ingress=GATEWAY)
    mounted = [{"name": "lora-a", "envVar": "OME_OVERLAY_LORA_A", "mountPath": "/mnt/overlays/lora-a",
                "distribution": "PerNode"}]
    return Case(state=state, overlays=(mounted, ["lora-b: NotReady"]),
                model={"refusal": None, "held": None, "copies": 2}, pin=("llama-rt-5f6d", "sync-3"))


def _omenative_blue_green() -> Case:
    """OMENative engine and decoder rolling blue-green: the replicas' lifecycle and the autoscaler in
    their API form, coordination, migration history, no Gateway; skipped overlays only (the mounted
    list is removed), a pin dropped (both fields removed), the model waiting to be Ready."""
    lifecycle: dict[str, object] = {
        "observedGeneration": 3, "currentRevision": "llama-engine-7b9c", "updateRevision": "llama-engine-8d1e",
        "collisionCount": 0, "labelSelector": "ome.io/inferencereplica=llama-engine", "replicas": 2,
        "readyReplicas": 2, "servingReplicas": 1, "availableReplicas": 1, "updatedReplicas": 1,
        "updatedReadyReplicas": 1,
        "conditions": [{"type": "Available", "status": "True", "observedGeneration": 3,
                        "lastTransitionTime": "2026-12-05T09:00:00Z", "reason": "MinimumReplicasAvailable",
                        "message": ""}],
        "rolloutHold": {"gate": "Sequential", "reason": "Sequential waiting on decoder",
                        "target": "llama-engine-8d1e", "since": "2026-12-05T09:45:00Z"}}
    autoscaler: dict[str, object] = {
        "class": "HPA", "managedBy": "ome", "specSource": "isvc", "currentReplicas": 2, "desiredReplicas": 3,
        "lastScaleTime": "2026-12-05T09:50:00Z",
        "conditions": [{"type": "AbleToScale", "status": "True", "lastTransitionTime": "2026-12-05T08:00:00Z",
                        "reason": "ReadyForNewScale", "message": "recommended size matches current size"}]}
    local = "http://llama-engine.team-a.svc.cluster.local"
    components = {
        ENGINE: ComponentView(url=local, address=local, stable="e1", latest_ready="e1",
                              traffic=[TrafficWeight(revision="e1", weight=100)], serving_ready=True, desired="e2",
                              replica="llama-engine", lifecycle=lifecycle, autoscaler=autoscaler),
        DECODER: ComponentView(url="http://llama-decoder.team-a.svc.cluster.local", stable="d1",
                               traffic=[TrafficWeight(revision="d1", weight=100)], serving_ready=False,
                               replica="llama-decoder", lifecycle={}),
    }
    coordination = {
        "1": RolloutCoordinationGroupStatus(name="1", components=[DECODER], policy=CoordinationPolicy.BLUE_GREEN,
                                            phase=CoordinationPhase.IDLE),
        "0": RolloutCoordinationGroupStatus(name="0", components=[ENGINE, DECODER],
                                            policy=CoordinationPolicy.BLUE_GREEN, order=[DECODER, ENGINE],
                                            phase=CoordinationPhase.SURGING, current_component=DECODER,
                                            observed_surge="100%", last_transition_time=OPENED, message="surging"),
    }
    history = [MigrationHistoryEntry(id="m-1", component=ENGINE, instance=0, replacement_instance=2,
                                     mode=MigrationMode.SURGE, phase=MigrationPhase.SURGE_PENDING,
                                     requested_at=OPENED, reason="node drain", requested_by="ops",
                                     events=[MigrationEvent(at=NOW, message="accepted")])]
    state = ServiceState(components=components, coordination=coordination, migration_history=history,
                         ingress=IngressObservation())
    return Case(state=state, overlays=([], ["lora-b: NotReady"]),
                model={"refusal": None, "held": ServingHold(reason="ModelNotReady", message="no Ready copy yet"),
                       "copies": 0},
                pin=(None, None))


def _refused_while_the_ingress_block_is_unreadable() -> Case:
    """A refused spec while the ingress block cannot be read: nothing about addresses is written."""
    local = "http://llama-engine.team-a.svc.cluster.local"
    state = ServiceState(components={ENGINE: ComponentView(url=local, address=local, stable="e1",
                                                           traffic=[TrafficWeight(revision="e1", weight=100)])},
                         ingress=IngressObservation(problem_reason="InvalidHost", problem="no DNS name"))
    refusal = Refusal(generation=3, reason=ErrorType.INVALID_INPUT, message="engine: nothing to run")
    return Case(state=state, model={"refusal": refusal, "held": None, "copies": None})


def _held_before_the_first_route() -> Case:
    """A Gateway, but no route yet; the runtime cannot serve the model (blocked)."""
    state = ServiceState(components={ENGINE: ComponentView(stable="e1")}, ingress=GATEWAY)
    return Case(state=state, model={"refusal": None, "held": ServingHold(reason="NoRuntimeMatches",
                                                                          message="no runtime supports llama"),
                                    "copies": None})


CASES: dict[str, Case] = {
    "new": Case(state=ServiceState()),
    "raw-deployment-before-the-ingress-block": Case(state=ServiceState(components={ENGINE: ComponentView(
        url="http://llama-engine.team-a.example.com", stable="e1", latest_ready="e1",
        traffic=[TrafficWeight(revision="e1", weight=100)], serving_ready=True)})),
    "canary-behind-a-gateway": _canary_behind_a_gateway(),
    "omenative-blue-green": _omenative_blue_green(),
    "refused-while-the-ingress-block-is-unreadable": _refused_while_the_ingress_block_is_unreadable(),
    "held-before-the-first-route": _held_before_the_first_route(),
}


def written(case: Case) -> InferenceServiceStatus:
    """The status as InferenceServiceWorkflow._write_status builds it: the workflow's memory, then
    what the write adds beside it."""
    built = status.service_status(ISVC, case.state, NOW)
    mounted, skipped = case.overlays
    if mounted or skipped:
        built.mounted_overlays = [MountedOverlay.model_validate(m) for m in mounted] or None
    if case.model is not None:
        built.model_status = status.model_status(case.state, now=NOW, **case.model)
    if case.pin is not None:
        built.pinned_revision_name, built.last_runtime_sync_token = case.pin
    if case.state.migration_history:
        built.migration_history = case.state.migration_history
    return built


@pytest.mark.parametrize("name", list(CASES))
def test_the_model_writes_the_patch_the_dicts_wrote(name: str) -> None:
    assert written(CASES[name]).to_merge_patch(whole_values=True) == EXPECTED[name]


def test_the_patch_reads_back_as_the_status_it_came_from() -> None:
    """What is written is the kind's status: it validates, and says again what the model said."""
    for case in CASES.values():
        patch = written(case).to_merge_patch(whole_values=True)
        kept = {k: v for k, v in patch.items() if v is not None}
        assert InferenceServiceStatus.model_validate(kept).to_merge_patch(whole_values=True) == kept


ROUTER_CANARY = {
    "targetID": "t-1",
    "canaryRevisionHash": "r2",
    "stableRevisionHash": "r1",
    "currentStep": 1,
    "stepEnteredTime": "2026-12-05T09:30:00.123000Z",
    "observedTrafficWeight": 10,
    "promotedThrough": "r2",
    "preStepHold": False,
    "failed": {"reason": "CapacityTimeout", "time": "2026-12-05T10:00:00Z"},
}
"""The canary the dict-built path wrote for the entrypoint (the router), on status.components.router and
mirrored on status.canary."""

# What the dict-built path wrote for each case (60cc8b7), recorded once.
EXPECTED: dict[str, dict[str, Any]] = {
    "new": {"components": {}, "rollout": {}},
    "raw-deployment-before-the-ingress-block": {
        "components": {
            "engine": {
                "url": "http://llama-engine.team-a.example.com",
                "latestReadyRevision": "llama-engine-rev-e1",
                "latestRolledoutRevision": "llama-engine-rev-e1",
                "traffic": [
                    {
                        "revisionName": "llama-engine-rev-e1",
                        "percent": 100,
                        "tag": "latest",
                        "latestRevision": True,
                    }
                ],
            }
        },
        "url": "http://llama-engine.team-a.example.com",
        "rollout": {},
    },
    "canary-behind-a-gateway": {
        "components": {
            "engine": {
                "url": "http://llama-engine.team-a.svc.cluster.local",
                "rolloutPhase": "Canarying",
                "latestReadyRevision": "llama-engine-rev-e2",
                "latestRolledoutRevision": "llama-engine-rev-e1",
                "previousRolledoutRevision": "llama-engine-rev-e0",
                "traffic": [
                    {
                        "revisionName": "llama-engine-rev-e1",
                        "percent": 90,
                        "tag": "latest",
                        "latestRevision": True,
                    },
                    {
                        "revisionName": "llama-engine-rev-e2",
                        "percent": 10,
                        "tag": "canary",
                        "latestRevision": False,
                    },
                ],
            },
            "router": {
                "url": "http://llama.team-a.example.test",
                "rolloutPhase": "Paused",
                "latestReadyRevision": "llama-router-rev-r2",
                "latestRolledoutRevision": "llama-router-rev-r1",
                "canary": ROUTER_CANARY,
                "traffic": [
                    {
                        "revisionName": "llama-router-rev-r1",
                        "percent": 90,
                        "tag": "latest",
                        "latestRevision": True,
                    },
                    {
                        "revisionName": "llama-router-rev-r2",
                        "percent": 10,
                        "tag": "canary",
                        "latestRevision": False,
                    },
                ],
            },
        },
        "url": "http://llama.team-a.example.test",
        "address": {"url": "http://llama-router.team-a.svc.cluster.local"},
        "addresses": [
            {"name": "external", "url": "http://llama.team-a.example.test"},
            {"name": "cluster-local", "url": "http://llama-router.team-a.svc.cluster.local"},
        ],
        "canary": ROUTER_CANARY,
        "rollout": {
            "activeRun": {
                "runID": "uid-1-1,uid-1-decoder",
                "openedAt": "2026-12-05T09:30:00.123000Z",
                "pinnedAt": "2026-12-05T09:30:00.123000Z",
                "targetRevisions": [
                    {"component": "engine", "revision": "e2", "stableRevision": "e1"},
                    {"component": "router", "revision": "r2", "stableRevision": "r1"},
                ],
                "plan": {
                    "groups": [
                        {
                            "source": "Policy",
                            "policyRef": {"name": "fast", "progression": "canary", "kind": "RolloutPolicy"},
                            "policyGeneration": 4,
                            "portableDigest": "sha256:1",
                            "group": {
                                "components": ["engine", "router"],
                                "canary": {
                                    "steps": [
                                        {"capacity": "50%", "traffic": 10},
                                        {"capacity": "100%", "traffic": 50},
                                    ]
                                },
                                "policyRef": {"name": "fast", "progression": "canary", "kind": "RolloutPolicy"},
                            },
                        },
                        {
                            "source": "Inline",
                            "portableDigest": "sha256:decoder",
                            "group": {"components": ["decoder"], "blueGreen": {}},
                        },
                    ]
                },
            },
            "lastRun": {
                "outcome": "Superseded",
                "openedAt": "2026-12-05T09:30:00.123000Z",
                "closedAt": "2026-12-05T10:00:00Z",
                "targetRevisions": [
                    {"component": "engine", "revision": "e2", "stableRevision": "e1"},
                    {"component": "router", "revision": "r2", "stableRevision": "r1"},
                ],
                "groups": [{"source": "Inline", "portableDigest": "sha256:0"}],
            },
            "groups": [
                {
                    "index": 0,
                    "source": "Inline",
                    "policyRef": {"name": "fast", "progression": "canary", "kind": "RolloutPolicy"},
                    "observedDigest": "sha256:0",
                    "shadowedPolicyRef": {"name": "fast", "wouldPinDigest": "sha256:p"},
                },
                {"index": 1, "source": "Policy", "observedDigest": "sha256:1"},
            ],
        },
        "mountedOverlays": [
            {
                "name": "lora-a",
                "envVar": "OME_OVERLAY_LORA_A",
                "mountPath": "/mnt/overlays/lora-a",
                "distribution": "PerNode",
            }
        ],
        "modelStatus": {
            "transitionStatus": "InProgress",
            "modelRevisionStates": {"activeModelState": "Loaded", "targetModelState": "Loaded"},
            "modelCopies": {"failedCopies": 0, "totalCopies": 2},
        },
        "pinnedRevisionName": "llama-rt-5f6d",
        "lastRuntimeSyncToken": "sync-3",
    },
    "omenative-blue-green": {
        "components": {
            "engine": {
                "url": "http://llama-engine.team-a.svc.cluster.local",
                "latestReadyRevision": "llama-engine-rev-e1",
                "latestRolledoutRevision": "llama-engine-rev-e1",
                "traffic": [
                    {
                        "revisionName": "llama-engine-rev-e1",
                        "percent": 100,
                        "tag": "latest",
                        "latestRevision": True,
                    }
                ],
                "scaleTargetRef": {
                    "apiVersion": "ome.io/v1beta1",
                    "kind": "InferenceReplica",
                    "name": "llama-engine",
                },
                "lifecycle": {
                    "observedGeneration": 3,
                    "currentRevision": "llama-engine-7b9c",
                    "updateRevision": "llama-engine-8d1e",
                    "collisionCount": 0,
                    "labelSelector": "ome.io/inferencereplica=llama-engine",
                    "replicas": 2,
                    "readyReplicas": 2,
                    "servingReplicas": 1,
                    "availableReplicas": 1,
                    "updatedReplicas": 1,
                    "updatedReadyReplicas": 1,
                    "conditions": [
                        {
                            "type": "Available",
                            "status": "True",
                            "observedGeneration": 3,
                            "lastTransitionTime": "2026-12-05T09:00:00Z",
                            "reason": "MinimumReplicasAvailable",
                            "message": "",
                        }
                    ],
                    "rolloutHold": {
                        "gate": "Sequential",
                        "reason": "Sequential waiting on decoder",
                        "target": "llama-engine-8d1e",
                        "since": "2026-12-05T09:45:00Z",
                    },
                },
                "autoscaler": {
                    "class": "HPA",
                    "managedBy": "ome",
                    "specSource": "isvc",
                    "currentReplicas": 2,
                    "desiredReplicas": 3,
                    "lastScaleTime": "2026-12-05T09:50:00Z",
                    "conditions": [
                        {
                            "type": "AbleToScale",
                            "status": "True",
                            "lastTransitionTime": "2026-12-05T08:00:00Z",
                            "reason": "ReadyForNewScale",
                            "message": "recommended size matches current size",
                        }
                    ],
                },
            },
            "decoder": {
                "url": "http://llama-decoder.team-a.svc.cluster.local",
                "latestRolledoutRevision": "llama-decoder-rev-d1",
                "traffic": [
                    {
                        "revisionName": "llama-decoder-rev-d1",
                        "percent": 100,
                        "tag": "latest",
                        "latestRevision": True,
                    }
                ],
                "scaleTargetRef": {
                    "apiVersion": "ome.io/v1beta1",
                    "kind": "InferenceReplica",
                    "name": "llama-decoder",
                },
                "lifecycle": {},
            },
        },
        "url": "http://llama-engine.team-a.svc.cluster.local",
        "address": {"url": "http://llama-engine.team-a.svc.cluster.local"},
        "addresses": [{"name": "cluster-local", "url": "http://llama-engine.team-a.svc.cluster.local"}],
        "rollout": {},
        "rolloutCoordination": {
            "groups": [
                {
                    "name": "0",
                    "components": ["engine", "decoder"],
                    "policy": "BlueGreen",
                    "order": ["decoder", "engine"],
                    "phase": "Surging",
                    "currentComponent": "decoder",
                    "observedSurge": "100%",
                    "lastTransitionTime": "2026-12-05T09:30:00.123000Z",
                    "message": "surging",
                },
                {"name": "1", "components": ["decoder"], "policy": "BlueGreen", "phase": "Idle"},
            ]
        },
        "mountedOverlays": None,
        "modelStatus": {
            "transitionStatus": "InProgress",
            "modelRevisionStates": {"activeModelState": "Pending", "targetModelState": "Loaded"},
            "lastFailureInfo": {
                "reason": "BaseModelNotReady",
                "message": "no Ready copy yet",
                "time": "2026-12-05T10:00:00Z",
            },
            "modelCopies": {"failedCopies": 0, "totalCopies": 0},
        },
        "pinnedRevisionName": None,
        "lastRuntimeSyncToken": None,
        "migrationHistory": [
            {
                "id": "m-1",
                "component": "engine",
                "instance": 0,
                "replacementInstance": 2,
                "mode": "Surge",
                "phase": "SurgePending",
                "requestedAt": "2026-12-05T09:30:00.123000Z",
                "reason": "node drain",
                "requestedBy": "ops",
                "events": [{"at": "2026-12-05T10:00:00Z", "message": "accepted"}],
            }
        ],
    },
    "refused-while-the-ingress-block-is-unreadable": {
        "components": {
            "engine": {
                "url": "http://llama-engine.team-a.svc.cluster.local",
                "latestRolledoutRevision": "llama-engine-rev-e1",
                "traffic": [
                    {
                        "revisionName": "llama-engine-rev-e1",
                        "percent": 100,
                        "tag": "latest",
                        "latestRevision": True,
                    }
                ],
            }
        },
        "rollout": {},
        "modelStatus": {
            "transitionStatus": "InvalidSpec",
            "modelRevisionStates": {"activeModelState": "FailedToLoad", "targetModelState": "Loaded"},
            "lastFailureInfo": {
                "reason": "ModelLoadFailed",
                "message": "engine: nothing to run",
                "time": "2026-12-05T10:00:00Z",
            },
        },
    },
    "held-before-the-first-route": {
        "components": {"engine": {"latestRolledoutRevision": "llama-engine-rev-e1", "traffic": []}},
        "rollout": {},
        "modelStatus": {
            "transitionStatus": "BlockedByFailedLoad",
            "modelRevisionStates": {"activeModelState": "FailedToLoad", "targetModelState": "Loaded"},
            "lastFailureInfo": {
                "reason": "NoSupportingRuntime",
                "message": "no runtime supports llama",
                "time": "2026-12-05T10:00:00Z",
            },
        },
    },
}
