"""How a workload sees a Deckhouse Model: facts shared by the model webhook (annotated workloads) and the
serving renderer (an InferenceService whose spec.model names a Model), so both mount it the same way."""

from __future__ import annotations

import posixpath

MODELS_ROOT = "/models"
"""A Deckhouse model's weights appear at /models/<name> in the containers."""
MODEL_PATH_ENV = "MODEL_PATH"
IMAGE_PULL_POLICY = "IfNotPresent"
"""The artifact is mounted as an image volume named by digest: what the node holds is what the digest names."""


def mount_path(model_name: str) -> str:
    return posixpath.join(MODELS_ROOT, model_name)


def artifact_reference(registry_and_repository: str, digest: str) -> str:
    """`<registry>/<repository>@sha256:...`, what the image volume pulls."""
    return f"{registry_and_repository}@{digest}"
