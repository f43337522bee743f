"""An OCI image layout from finished layers, and moving it to and from a registry with the `oras` CLI."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from layers import Layer

MANIFEST = "application/vnd.oci.image.manifest.v1+json"
CONFIG = "application/vnd.oci.image.config.v1+json"
LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"


@dataclass(frozen=True)
class ImageConfig:
    user: str
    entrypoint: list[str]
    env: list[str]
    working_dir: str
    labels: dict[str, str]
    epoch: int
    history: list[str]
    """One line per layer: what made it."""


def _canonical(document: object) -> bytes:
    return json.dumps(document, sort_keys=True, separators=(",", ":")).encode()


def _write_blob(layout: Path, data: bytes) -> dict[str, object]:
    digest = hashlib.sha256(data).hexdigest()
    path = layout / "blobs" / "sha256" / digest
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return {"digest": f"sha256:{digest}", "size": len(data)}


def write_layout(layout: Path, layers: list[Layer], image: ImageConfig, tag: str) -> str:
    """An OCI image layout at `layout` holding the image (its index tags it `tag`); returns the manifest digest."""
    shutil.rmtree(layout, ignore_errors=True)
    (layout / "blobs" / "sha256").mkdir(parents=True)
    (layout / "oci-layout").write_text('{"imageLayoutVersion":"1.0.0"}')
    created = datetime.fromtimestamp(image.epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    config = {
        "architecture": "amd64", "os": "linux", "created": created,
        "config": {"User": image.user, "Entrypoint": image.entrypoint, "Env": image.env,
                   "WorkingDir": image.working_dir, "Labels": image.labels},
        "rootfs": {"type": "layers", "diff_ids": [layer.diff_id for layer in layers]},
        "history": [{"created": created, "created_by": line} for line in image.history],
    }
    config_descriptor = {"mediaType": CONFIG, **_write_blob(layout, _canonical(config))}
    for layer in layers:
        target = layout / "blobs" / "sha256" / layer.digest.removeprefix("sha256:")
        try:  # the cache and the layout on one filesystem: no copy of a 100 MB blob
            os.link(layer.path, target)
        except OSError:
            shutil.copyfile(layer.path, target)
    manifest = {
        "schemaVersion": 2, "mediaType": MANIFEST, "config": config_descriptor,
        "layers": [{"mediaType": LAYER, "digest": layer.digest, "size": layer.size} for layer in layers],
        "annotations": {key: value for key, value in image.labels.items()},
    }
    manifest_descriptor = {"mediaType": MANIFEST, **_write_blob(layout, _canonical(manifest))}
    index = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
             "manifests": [{**manifest_descriptor, "annotations": {"org.opencontainers.image.ref.name": tag}}]}
    (layout / "index.json").write_bytes(_canonical(index))
    return str(manifest_descriptor["digest"])


def push(oras: str, layout: Path, tag: str, reference: str, plain_http: bool,
         registry_config: Path | None = None) -> None:
    """Copy the layout's `tag` to `reference` (registry/repository:tag). Credentials are oras's own: those of
    `oras login` / `docker login` in ~/.docker/config.json (or $DOCKER_CONFIG), or the file `registry_config`."""
    argv = [oras, "cp", "--no-tty", "--from-oci-layout", f"{layout}:{tag}", reference]
    if plain_http:
        argv.append("--to-plain-http")
    if registry_config is not None:
        argv += ["--to-registry-config", str(registry_config)]
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)


def pull(oras: str, reference: str, layout: Path, tag: str, plain_http: bool) -> None:
    """Copy `reference` (by tag or digest) into an OCI layout at `layout`, tagged `tag`."""
    argv = [oras, "cp", "--no-tty", "--to-oci-layout", reference, f"{layout}:{tag}"]
    if plain_http:
        argv.append("--from-plain-http")
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
