"""A failed benchmark Job in words (rendering/benchmark_failure.py) and as `benchmark.job_state` reads it from
the Job and its pods (activities/benchmark/activities.py job_phase): the Job's reason, then the exit of each
container that ended non-zero (code, the runtime's reason, the signal, its last line); from the Job's
PodFailurePolicy message when the pod is gone. A completed pvc:// Job's summary is read from its pod."""

from __future__ import annotations

import pytest
from kubernetes import client

from servingops.activities.benchmark.activities import job_phase
from servingops.activities.benchmark.types import JobPhase
from servingops.rendering.benchmark_failure import ContainerExit, failure_message, signal_name

pytestmark = pytest.mark.unit

POLICY = "Container genai-bench for pod ns/killed-g1-x7 failed with exit code 143 matching FailJob rule at index 0"


def test_a_killed_container_is_named_with_its_exit_reason_and_signal() -> None:
    said = failure_message("killed-g1", "PodFailurePolicy", POLICY,
                           [ContainerExit("genai-bench", 143, "Error"), ContainerExit("redact", 0, "Completed")])
    assert said == (f"Job killed-g1 failed: PodFailurePolicy {POLICY}; "
                    "container genai-bench exited 143 (Error, SIGTERM)")


def test_an_oom_kill_and_a_last_line_are_said() -> None:
    said = failure_message("b-g2", "BackoffLimitExceeded", "Job has reached the specified backoff limit",
                           [ContainerExit("genai-bench", 137, "OOMKilled", "loading\nKilled\n\n")])
    assert said.endswith("; container genai-bench exited 137 (OOMKilled, SIGKILL): Killed"), said
    plain = failure_message("b-g2", "BackoffLimitExceeded", "", [ContainerExit("genai-bench", 2, "Error",
                                                                               "usage: genai-bench ...")])
    assert plain == ("Job b-g2 failed: BackoffLimitExceeded; container genai-bench exited 2 (Error): "
                     "usage: genai-bench ...")


def test_a_pod_gone_before_it_was_read_leaves_the_job_s_policy_message_to_say_the_exit() -> None:
    said = failure_message("killed-g1", "PodFailurePolicy", POLICY, [])
    assert said.endswith("; container genai-bench exited 143 (SIGTERM)"), said
    assert failure_message("d-g1", "DeadlineExceeded", "Job was active longer than specified deadline", []) == (
        "Job d-g1 failed: DeadlineExceeded Job was active longer than specified deadline")


def test_signal_names() -> None:
    assert (signal_name(143), signal_name(137), signal_name(1), signal_name(128)) == ("SIGTERM", "SIGKILL", "", "")


def _terminated(name: str, code: int, reason: str, message: str | None = None) -> client.V1ContainerStatus:
    return client.V1ContainerStatus(name=name, image="i", image_id="", ready=False, restart_count=0,
                                    state=client.V1ContainerState(terminated=client.V1ContainerStateTerminated(
                                        exit_code=code, reason=reason, message=message)))


def _job(condition: str, reason: str, message: str, containers: list[str]) -> client.V1Job:
    return client.V1Job(
        metadata=client.V1ObjectMeta(name="b-g1"),
        spec=client.V1JobSpec(template=client.V1PodTemplateSpec(spec=client.V1PodSpec(
            containers=[client.V1Container(name=n) for n in containers]))),
        status=client.V1JobStatus(conditions=[client.V1JobCondition(type=condition, status="True", reason=reason,
                                                                    message=message)]))


def test_job_state_reads_the_failed_pod_s_containers() -> None:
    pod = client.V1Pod(status=client.V1PodStatus(phase="Failed", init_container_statuses=[
        _terminated("genai-bench", 137, "OOMKilled")], container_statuses=[
        client.V1ContainerStatus(name="summarize", image="i", image_id="", ready=False, restart_count=0,
                                 state=client.V1ContainerState(waiting=client.V1ContainerStateWaiting(
                                     reason="PodInitializing")))]))
    seen = job_phase(_job("Failed", "PodFailurePolicy", POLICY.replace("143", "137"), ["summarize"]), [pod])
    assert seen.phase == JobPhase.FAILED
    assert seen.message.endswith("; container genai-bench exited 137 (OOMKilled, SIGKILL)"), seen.message


def test_job_state_reads_a_completed_pvc_job_s_summary_from_its_pod() -> None:
    message = '{"benchSummary":1,"total":1,"rows":[["D(100,100)",1,17,0,24.881,29.9,232.756]]}'
    pod = client.V1Pod(status=client.V1PodStatus(phase="Succeeded", container_statuses=[
        _terminated("summarize", 0, "Completed", message)]))
    seen = job_phase(_job("Complete", "", "", ["summarize"]), [pod])
    assert seen.phase == JobPhase.SUCCEEDED and seen.summary_problem == ""
    assert seen.summary is not None and [(s.requests, s.ttft_p99_ms) for s in seen.summary] == [(17, 29.9)]
    gone = job_phase(_job("Complete", "", "", ["summarize"]), [])
    assert gone.summary is None and "did not report its summarize step" in gone.summary_problem
    oci = job_phase(_job("Complete", "", "", ["upload"]), [])
    assert oci.summary is None and oci.summary_problem == ""
