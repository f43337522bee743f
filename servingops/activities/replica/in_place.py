"""Pure in-place diff: can a live pod become what a revision renders without being recreated?

The apiserver lets a running pod change its containers' and init containers' images (and its
labels); every other spec field it refuses. So the rendered pod is compared with the live one
field by field, and only image (and label) differences may be applied.

The live pod carries what admission and defaulting added (the ServiceAccount token volume and
its mounts, default tolerations, imagePullPolicy, terminationMessagePath, protocol on ports,
...). A field the rendered pod sets must match; a field only the live pod has counts only for
the fields no admission plugin fills in, so a removed env var or command is still seen.

Scheduling-only fields (affinity, topology spread, node selector, tolerations, scheduling gates)
are not compared: they decide where a pod starts, and this pod has started (a migrated pod's own
node hints, which no revision holds, must not block its image update).

The one container field this product adds itself, the drain's preStop sleep (rendering's
drain_before_stop), is missing on pods made before pods got it: such a pod keeps running without
it through an image update, and gets it when it is next recreated, instead of refusing the update.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from servingops.rendering.render import DRAIN_SECONDS

_SERVICE_ACCOUNT_MOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
_SERVICE_ACCOUNT_VOLUME_PREFIX = "kube-api-access-"
_USER_ONLY_CONTAINER_FIELDS = ("command", "args", "env", "envFrom", "workingDir", "ports", "lifecycle",
                               "livenessProbe", "readinessProbe", "startupProbe", "volumeDevices", "resizePolicy")
"""Container fields nothing but the template sets: present only on the live pod means removed."""
_USER_ONLY_POD_FIELDS = ("readinessGates", "hostname", "subdomain", "hostNetwork", "runtimeClassName")
_SCHEDULING_ONLY = frozenset({"affinity", "topologySpreadConstraints", "nodeSelector", "tolerations",
                              "schedulingGates"})
_IMAGE = "image"


@dataclass
class InPlaceDiff:
    images: dict[tuple[str, str], str] = field(default_factory=dict)
    """(containers | initContainers, container name) -> the image to set."""
    labels: dict[str, str] = field(default_factory=dict)
    """Labels to set (added or changed; labels are mutable)."""
    refusals: list[str] = field(default_factory=list)
    """What differs that the apiserver will not change in place, most precise path first."""

    @property
    def possible(self) -> bool:
        return not self.refusals

    def patch(self, resource_version: str | None = None) -> dict[str, Any]:
        """A strategic merge patch (containers merge by name); resourceVersion makes it apply only
        to the pod this diff was computed against."""
        spec: dict[str, list[dict[str, str]]] = {}
        for (kind, name), image in sorted(self.images.items()):
            spec.setdefault(kind, []).append({"name": name, _IMAGE: image})
        metadata: dict[str, Any] = {"labels": dict(self.labels)} if self.labels else {}
        if resource_version:
            metadata["resourceVersion"] = resource_version
        body: dict[str, Any] = {"metadata": metadata}
        if spec:
            body["spec"] = spec
        return body

    def reason(self) -> str:
        return "; ".join(self.refusals)


def diff(desired: dict[str, Any], live: dict[str, Any]) -> InPlaceDiff:
    result = InPlaceDiff()
    want_labels = (desired.get("metadata") or {}).get("labels") or {}
    have_labels = (live.get("metadata") or {}).get("labels") or {}
    result.labels = {k: v for k, v in want_labels.items() if have_labels.get(k) != v}

    want_spec, have_spec = desired.get("spec") or {}, live.get("spec") or {}
    for kind in ("containers", "initContainers"):
        _diff_containers(kind, want_spec.get(kind) or [], have_spec.get(kind) or [], result)
    for key, want in want_spec.items():
        if key in ("containers", "initContainers") or key in _SCHEDULING_ONLY:
            continue
        have = have_spec.get(key)
        if key == "volumes":
            have = [v for v in have or [] if not str(v.get("name", "")).startswith(_SERVICE_ACCOUNT_VOLUME_PREFIX)]
        if not _covers(want, have):
            result.refusals.append(f"spec.{key} differs")
    for key in _USER_ONLY_POD_FIELDS:
        if key not in want_spec and have_spec.get(key):
            result.refusals.append(f"spec.{key} is set on the pod and not in the revision")
    return result


def _diff_containers(kind: str, want: list[dict[str, Any]], have: list[dict[str, Any]], result: InPlaceDiff) -> None:
    want_names = [c.get("name") for c in want]
    have_names = [c.get("name") for c in have]
    if want_names != have_names:
        result.refusals.append(f"spec.{kind} differ: {want_names} in the revision, {have_names} on the pod")
        return
    for wanted, live in zip(want, have, strict=True):
        name = str(wanted.get("name"))
        if wanted.get(_IMAGE) != live.get(_IMAGE):
            result.images[(kind, name)] = str(wanted.get(_IMAGE))
        for key, value in wanted.items():
            if key in ("name", _IMAGE):
                continue
            current = live.get(key)
            if key == "volumeMounts":
                current = [m for m in current or [] if m.get("mountPath") != _SERVICE_ACCOUNT_MOUNT]
            if key == "lifecycle" and current is None and _is_our_drain(value):
                continue
            if not _covers(value, current):
                result.refusals.append(f"{key} of {_noun(kind)} {name} differs")
        for key in _USER_ONLY_CONTAINER_FIELDS:
            if key not in wanted and live.get(key):
                result.refusals.append(f"{key} of {_noun(kind)} {name} is set on the pod and not in the revision")


def _is_our_drain(lifecycle: Any) -> bool:
    """Whether a rendered lifecycle is only the drain drain_before_stop adds (a sleep of at most DRAIN_SECONDS)."""
    return any(lifecycle == {"preStop": {"sleep": {"seconds": s}}} for s in range(1, DRAIN_SECONDS + 1))


def _noun(kind: str) -> str:
    return "init container" if kind == "initContainers" else "container"


def _covers(want: Any, have: Any) -> bool:
    """Whether the live value is what the rendered one asks for, allowing defaults the apiserver
    added: every key the rendered object sets matches; lists match item by item (same length)."""
    if isinstance(want, dict):
        if not isinstance(have, dict):
            return not want and have is None
        return all(_covers(value, have.get(key)) for key, value in want.items())
    if isinstance(want, list):
        if not isinstance(have, list):
            return not want and have is None
        return len(want) == len(have) and all(_covers(w, h) for w, h in zip(want, have, strict=True))
    if want is None:
        return True
    if isinstance(want, str) and isinstance(have, str | int) and not isinstance(have, bool):
        return _quantity_equal(want, have)
    return bool(want == have)


def _quantity_equal(want: str, have: str | int) -> bool:
    """Strings compare as written, except resource quantities the apiserver canonicalised
    ("1000m" stored as "1", "1Gi" kept): those compare by value."""
    if str(have) == want:
        return True
    return _quantity(want) is not None and _quantity(want) == _quantity(str(have))


_SUFFIXES = {"m": 1e-3, "": 1.0, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18,
             "Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40, "Pi": 2.0**50, "Ei": 2.0**60}


def _quantity(text: str) -> float | None:
    for suffix in sorted(_SUFFIXES, key=len, reverse=True):
        if suffix and not text.endswith(suffix):
            continue
        number = text[: len(text) - len(suffix)] if suffix else text
        try:
            return float(number) * _SUFFIXES[suffix]
        except ValueError:
            return None
    return None
