"""The Kubernetes access layer's own logic (clients/kube/): the timeout policy, get-or-none, delete-if-present,
create-unless-exists, server-side apply's arguments, the error mapping and the optimistic update's 409 loop.
What the apiserver does with these calls is covered end to end by the cluster tests."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException
from temporalio.exceptions import ApplicationError

from servingops.api_models.errors import ErrorType
from servingops.api_models.refs import ObjectRef
from servingops.clients.kube import calls, errors
from servingops.clients.kube.custom_objects import CONFLICT_RETRIES, CustomObjects
from servingops.clients.kube.timeouts import REQUEST_TIMEOUT

pytestmark = pytest.mark.unit


class Recorder:
    """A generated-client method: records its calls, answers from a script (a value, or an ApiException)."""

    def __init__(self, *answers: Any) -> None:
        self.answers = list(answers)
        self.calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls.append((args, kwargs))
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, BaseException):
            raise answer
        return answer


def api_error(status: int, body: str = "") -> ApiException:
    exc = ApiException(status=status, reason="test")
    exc.body = body
    return exc


def test_every_call_carries_the_default_timeout_unless_the_site_names_another() -> None:
    method = Recorder("ok")
    assert calls.call(method, "name", "ns") == "ok"
    assert method.calls[-1] == (("name", "ns"), {"_request_timeout": REQUEST_TIMEOUT})
    calls.call(method, "name", "ns", timeout=(2.0, 3.0), _preload_content=False)
    assert method.calls[-1][1] == {"_request_timeout": (2.0, 3.0), "_preload_content": False}


def test_get_or_none_says_none_for_absent_and_raises_anything_else() -> None:
    assert calls.get_or_none(Recorder({"a": 1}), "x") == {"a": 1}
    assert calls.get_or_none(Recorder(api_error(404)), "x") is None
    for status in (403, 409, 500):
        with pytest.raises(ApiException) as raised:
            calls.get_or_none(Recorder(api_error(status)), "x")
        assert raised.value.status == status


def test_delete_if_present_and_create_unless_exists() -> None:
    assert calls.delete_if_present(Recorder(None), "x") is True
    assert calls.delete_if_present(Recorder(api_error(404)), "x") is False
    with pytest.raises(ApiException):
        calls.delete_if_present(Recorder(api_error(409)), "x")
    assert calls.create_unless_exists(Recorder({"made": True}), "ns", {}) == {"made": True}
    assert calls.create_unless_exists(Recorder(api_error(409)), "ns", {}) is None
    with pytest.raises(ApiException):
        calls.create_unless_exists(Recorder(api_error(404)), "ns", {})


def test_apply_is_a_forced_server_side_apply_under_its_field_manager() -> None:
    method = Recorder({})
    calls.apply(method, "name", "ns", {"kind": "Role"}, field_manager="servingops-uploads")
    assert method.calls[-1] == (("name", "ns", {"kind": "Role"}), {
        "field_manager": "servingops-uploads", "force": True, "_content_type": "application/apply-patch+yaml",
        "_request_timeout": REQUEST_TIMEOUT})


def test_the_error_mapping() -> None:
    assert errors.absent(api_error(404)) and not errors.absent(api_error(410))
    assert errors.conflict(api_error(409)) and errors.forbidden(api_error(403))
    assert errors.invalid(api_error(400)) and errors.invalid(api_error(422)) and not errors.invalid(api_error(409))
    rejected = errors.rejected_write("Model ns/m", api_error(422, "spec.x: Invalid value"))
    assert isinstance(rejected, ApplicationError)
    assert (rejected.type, rejected.non_retryable) == (ErrorType.INVALID_OBJECT.value, True)
    assert rejected.message == "Model ns/m: spec.x: Invalid value"
    outlasted = errors.conflicts_outlasted("Model ns/m", 10)
    assert isinstance(outlasted, ApplicationError)
    assert (outlasted.type, outlasted.non_retryable) == (ErrorType.CONFLICT.value, False)


REF = ObjectRef(group="ai.deckhouse.io", version="v1alpha1", kind="Model", plural="models", namespace="ns",
                name="m", uid="u1")


class FakeCustom:
    """The CustomObjectsApi methods CustomObjects uses, over one stored object."""

    def __init__(self, obj: dict[str, Any] | None, replace_answers: list[Any] | None = None) -> None:
        self.obj = obj
        self.replace_answers = list(replace_answers or [])
        self.reads = 0
        self.written: list[dict[str, Any]] = []
        self.timeouts: list[Any] = []

    def get_namespaced_custom_object(self, group: str, version: str, namespace: str, plural: str, name: str,
                                     _request_timeout: Any = None) -> dict[str, Any]:
        self.reads += 1
        self.timeouts.append(_request_timeout)
        if self.obj is None:
            raise api_error(404)
        return {**self.obj, "metadata": dict(self.obj["metadata"])}

    def replace_namespaced_custom_object(self, group: str, version: str, namespace: str, plural: str, name: str,
                                         body: dict[str, Any], _request_timeout: Any = None) -> dict[str, Any]:
        self.timeouts.append(_request_timeout)
        if self.replace_answers:
            answer = self.replace_answers.pop(0)
            if isinstance(answer, BaseException):
                raise answer
        self.written.append(body)
        return body

    replace_namespaced_custom_object_status = replace_namespaced_custom_object


def _objects(fake: FakeCustom) -> CustomObjects:
    return CustomObjects(fake)  # type: ignore[arg-type]


def _obj(uid: str = "u1") -> dict[str, Any]:
    return {"metadata": {"name": "m", "uid": uid, "resourceVersion": "1"}, "spec": {}}


def test_get_by_ref_is_none_when_gone_or_when_the_name_belongs_to_another_uid() -> None:
    assert _objects(FakeCustom(_obj())).get(REF) == _obj()
    assert _objects(FakeCustom(None)).get(REF) is None
    assert _objects(FakeCustom(_obj(uid="u2"))).get(REF) is None
    assert _objects(FakeCustom(_obj(uid="u2"))).get(REF.model_copy(update={"uid": None})) is not None


def _mark(obj: dict[str, Any]) -> bool:
    obj["spec"]["marked"] = True
    return True


def test_update_rereads_on_conflict_and_writes_the_fresh_read() -> None:
    fake = FakeCustom(_obj(), replace_answers=[api_error(409), api_error(409)])
    written = _objects(fake).update(REF, _mark)
    assert written is not None and written["spec"] == {"marked": True}
    assert fake.reads == 3 and len(fake.written) == 1
    assert set(fake.timeouts) == {REQUEST_TIMEOUT}


def test_update_writes_nothing_when_mutate_says_so_and_none_when_gone() -> None:
    fake = FakeCustom(_obj())
    assert _objects(fake).update(REF, lambda obj: False) == _obj() and fake.written == []
    assert _objects(FakeCustom(None)).update(REF, _mark) is None
    assert _objects(FakeCustom(_obj(), replace_answers=[api_error(404)])).update(REF, _mark) is None


def test_update_gives_up_after_its_retries_with_a_retryable_conflict() -> None:
    fake = FakeCustom(_obj(), replace_answers=[api_error(409)] * CONFLICT_RETRIES)
    with pytest.raises(ApplicationError) as raised:
        _objects(fake).update(REF, _mark)
    assert (raised.value.type, raised.value.non_retryable) == (ErrorType.CONFLICT.value, False)
    assert fake.reads == CONFLICT_RETRIES


def test_update_refused_by_the_apiserver_is_permanent_and_other_errors_pass_through() -> None:
    with pytest.raises(ApplicationError) as raised:
        _objects(FakeCustom(_obj(), replace_answers=[api_error(422, "bad")])).update(REF, _mark, status=True)
    assert (raised.value.type, raised.value.non_retryable) == (ErrorType.INVALID_OBJECT.value, True)
    with pytest.raises(ApiException) as passed:
        _objects(FakeCustom(_obj(), replace_answers=[api_error(500)])).update(REF, _mark)
    assert passed.value.status == 500
