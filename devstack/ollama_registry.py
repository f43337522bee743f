"""Ollama-shaped models in a distribution registry: the local stand-in for registry.ollama.ai.

Ollama's registry is an OCI distribution registry whose manifests are Docker v2 image manifests with a
config blob of Ollama's own shape ({model_format, model_family, file_type, ...}) and layers with Ollama media
types (`application/vnd.ollama.image.model` for the GGUF, `.template`, `.params`, `.license`, `.system`,
`.projector`, ...). `publish_ollama_model` generates a small valid GGUF with `devstack.model_repos` and pushes
it with such layers under `library/<name>:<tag>`, so the real source code path (manifest, blobs, ranges) runs
against a real registry (Debian's docker-registry in the tests' `oci_registry` fixture).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from devstack import model_repos

# The media types are the ones the import reads: one definition, in the activity.
from servingops.activities.sources.ollama import (
    CONFIG_MEDIA_TYPE,
    MEDIA_LICENSE,
    MEDIA_MODEL,
    MEDIA_PARAMS,
    MEDIA_SYSTEM,
    MEDIA_TEMPLATE,
)
from servingops.api_models.canonical import canonical_json
from servingops.clients.oci.media_types import DOCKER_MANIFEST_V2
from servingops.clients.oci.modelpack import sha256_digest
from servingops.clients.oci.registry_client import ModelRegistry, file_sha256

# A chat template in Ollama's Go template syntax, as the library's models ship them.
DEFAULT_TEMPLATE = (
    "{{- if .System }}<|system|>\n{{ .System }}</s>\n{{ end }}"
    "{{- range .Messages }}<|{{ .Role }}|>\n{{ .Content }}</s>\n{{ end }}<|assistant|>\n"
)
DEFAULT_PARAMS: dict[str, Any] = {"stop": ["<|system|>", "<|user|>", "<|assistant|>", "</s>"], "temperature": 0.7}
DEFAULT_LICENSE = "Apache License\nVersion 2.0, January 2004\nhttp://www.apache.org/licenses/\n"


@dataclass
class OllamaModel:
    """What was published: enough for a test to compare every fetched file with its origin."""

    name: str
    tag: str
    manifest_digest: str
    gguf: Path
    """The generated GGUF file, byte for byte the model layer."""
    layers: dict[str, str] = field(default_factory=dict)
    """Media type -> digest of each layer."""
    blobs: dict[str, bytes] = field(default_factory=dict)
    """Digest -> content of the small (text) layers."""
    config: dict[str, Any] = field(default_factory=dict)

    @property
    def repository(self) -> str:
        return f"library/{self.name}"

    @property
    def url(self) -> str:
        """The user-facing source URL of this model."""
        return f"https://ollama.com/library/{self.name}:{self.tag}"


def publish_ollama_model(
    registry_address: str,
    name: str,
    tag: str = "latest",
    *,
    workdir: Path | None = None,
    template: str | None = DEFAULT_TEMPLATE,
    params: dict[str, Any] | None = None,
    license: str | None = DEFAULT_LICENSE,
    system: str | None = None,
    capabilities: list[str] | None = None,
    model_format: str = "gguf",
    quantization: str = "Q8_0",
    insecure: bool = True,
    **gguf: Any,
) -> OllamaModel:
    """Generate a GGUF (extra keyword arguments go to `model_repos.make_gguf_repo`) and publish it as the
    Ollama model `library/<name>:<tag>` with the given text layers (None leaves a layer out)."""
    params = DEFAULT_PARAMS if params is None else params
    scratch = Path(workdir or tempfile.mkdtemp(prefix="ollama-model-"))
    generated = model_repos.make_gguf_repo(
        scratch / "hub", f"ollama/{name}-{uuid.uuid4().hex[:8]}", model_name=name,
        quantizations=(quantization,), **gguf,
    )  # fmt: skip
    gguf_path = next(generated.snapshot / f for f in generated.files if f.endswith(".gguf"))
    repository = f"library/{name}"
    published = OllamaModel(name=name, tag=tag, manifest_digest="", gguf=gguf_path)
    with ModelRegistry(registry_address, insecure=insecure) as registry:
        descriptors: list[dict[str, Any]] = []
        digest, size = file_sha256(str(gguf_path))
        registry.upload_blob_streaming(repository, gguf_path, digest, size)
        descriptors.append({"mediaType": MEDIA_MODEL, "digest": digest, "size": size})
        published.layers[MEDIA_MODEL] = digest
        texts = [
            (MEDIA_TEMPLATE, template),
            (MEDIA_SYSTEM, system),
            (MEDIA_PARAMS, json.dumps(params) if params else None),
            (MEDIA_LICENSE, license),
        ]
        for media_type, text in texts:
            if text is None:
                continue
            data = text.encode()
            blob_digest = sha256_digest(data)
            registry.put_blob_bytes(repository, data, blob_digest)
            descriptors.append({"mediaType": media_type, "digest": blob_digest, "size": len(data)})
            published.layers[media_type] = blob_digest
            published.blobs[blob_digest] = data
        config: dict[str, Any] = {
            "model_format": model_format,
            "model_family": gguf.get("architecture", "llama"),
            "model_families": [gguf.get("architecture", "llama")],
            "model_type": "tiny",
            "file_type": quantization,
            "architecture": "amd64",
            "os": "linux",
            "rootfs": {"type": "layers", "diff_ids": [d["digest"] for d in descriptors]},
        }
        if capabilities is not None:
            config["capabilities"] = capabilities
        config_bytes = canonical_json(config)
        config_digest = sha256_digest(config_bytes)
        registry.put_blob_bytes(repository, config_bytes, config_digest)
        manifest = {
            "schemaVersion": 2,
            "mediaType": DOCKER_MANIFEST_V2,
            "config": {"mediaType": CONFIG_MEDIA_TYPE, "digest": config_digest, "size": len(config_bytes)},
            "layers": descriptors,
        }
        published.manifest_digest = registry.put_manifest(repository, tag, manifest, media_type=DOCKER_MANIFEST_V2)
        published.config = config
    return published


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Publish a tiny Ollama-shaped model to a local registry.")
    parser.add_argument("--registry", required=True, help="host:port of a plain-HTTP distribution registry")
    parser.add_argument("--name", default="tiny-llama")
    parser.add_argument("--tag", default="latest")
    args = parser.parse_args(argv)
    model = publish_ollama_model(args.registry, args.name, args.tag)
    print(f"{model.url} -> {model.manifest_digest}  (SERVINGOPS_OLLAMA_REGISTRY=http://{args.registry})")


if __name__ == "__main__":
    main()
