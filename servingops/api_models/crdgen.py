"""Generate CustomResourceDefinition manifests from the pydantic models.

The models are the single source of truth: `servingops crds` writes deploy/crds/ from them and
a test fails when the committed manifests differ. Pydantic's JSON Schema is turned into a
Kubernetes structural schema: $refs inlined, Optional unwrapped, keys the apiserver rejects
dropped, and the CEL rules / list-type markers carried through.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from servingops.api_models.base import KubeResource

# Keys of JSON Schema that a CRD's openAPIV3Schema accepts (plus every x-kubernetes-* key).
_ALLOWED_KEYS = {
    "type",
    "format",
    "description",
    "properties",
    "required",
    "items",
    "enum",
    "default",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "minLength",
    "maxLength",
    "pattern",
    "minItems",
    "maxItems",
    "minProperties",
    "maxProperties",
    "additionalProperties",
    "anyOf",
}
# Fields every object has, served by the apiserver itself.
_ROOT_FIELDS = {"apiVersion", "kind", "metadata"}
_RULES = "x-kubernetes-validations"


class _Inliner:
    def __init__(self, defs: dict[str, Any]) -> None:
        self.defs = defs

    def convert(self, node: dict[str, Any]) -> dict[str, Any]:
        node = copy.deepcopy(node)
        if "$ref" in node:
            target = self.defs[node.pop("$ref").rsplit("/", 1)[-1]]
            # Keys beside the $ref (the field's own description, default) win over the type's;
            # CEL rules of the field and of the type both apply.
            merged = {**copy.deepcopy(target), **node}
            rules = target.get(_RULES, []) + node.get(_RULES, [])
            if rules:
                merged[_RULES] = rules
            node = merged
        for combiner in ("anyOf", "oneOf"):
            if combiner in node:
                node = self._unwrap_optional(node, combiner)
        if "allOf" in node and len(node["allOf"]) == 1:
            node = {**node.pop("allOf")[0], **node}
            return self.convert(node)
        if "const" in node:
            node["enum"] = [node.pop("const")]
        if node.get("default", "missing") is None:
            del node["default"]
        # OpenAPI v3.0 (what the apiserver speaks) writes exclusive bounds as booleans.
        for bound, plain in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
            if isinstance(node.get(bound), int | float) and not isinstance(node.get(bound), bool):
                node[plain] = node[bound]
                node[bound] = True
        if node.get("type") == "object" and node.get("additionalProperties") is False:
            del node["additionalProperties"]
        out: dict[str, Any] = {}
        for key, value in node.items():
            if not (key in _ALLOWED_KEYS or key.startswith("x-kubernetes-")):
                continue
            if key == "properties":
                out[key] = {name: self.convert(sub) for name, sub in value.items()}
            elif key == "items" or (key == "additionalProperties" and isinstance(value, dict)):
                out[key] = self.convert(value)
            elif key == "anyOf":
                out[key] = [self.convert(sub) for sub in value]
            elif key == "description":
                out[key] = " ".join(str(value).split())
            else:
                out[key] = value
        if "enum" in out and "type" not in out:
            out["type"] = "string" if all(isinstance(v, str) for v in out["enum"]) else "integer"
        if "properties" in out and "type" not in out:
            out["type"] = "object"
        return out

    def _unwrap_optional(self, node: dict[str, Any], combiner: str) -> dict[str, Any]:
        options = [opt for opt in node[combiner] if opt.get("type") != "null"]
        if len(options) == len(node[combiner]) and node.get("x-kubernetes-int-or-string"):
            return node
        rest = {k: v for k, v in node.items() if k != combiner}
        if len(options) == 1:
            return {**self.convert(options[0]), **rest}
        return {**rest, combiner: options}


def openapi_schema(model: type[KubeResource]) -> dict[str, Any]:
    """The structural openAPIV3Schema of one served kind."""
    raw = model.model_json_schema(by_alias=True, mode="validation")
    inliner = _Inliner(raw.get("$defs", {}))
    properties: dict[str, Any] = {
        "apiVersion": {"type": "string", "description": "APIVersion of this representation of the object."},
        "kind": {"type": "string", "description": "Kind is the REST resource this object represents."},
        "metadata": {"type": "object"},
    }
    for name, sub in raw["properties"].items():
        if name not in _ROOT_FIELDS:
            properties[name] = inliner.convert(sub)
    schema: dict[str, Any] = {"type": "object"}
    if model.__doc__:
        schema["description"] = " ".join(model.__doc__.split())
    schema["properties"] = properties
    required = [name for name in raw.get("required", []) if name not in _ROOT_FIELDS]
    if required:
        schema["required"] = required
    for key, value in raw.items():
        if key.startswith("x-kubernetes-"):
            schema[key] = value
    return schema


def crd_manifest(model: type[KubeResource]) -> dict[str, Any]:
    info = model.crd
    subresources: dict[str, Any] = {"status": {}}
    if info.scale:
        scale: dict[str, Any] = {
            "specReplicasPath": info.scale.spec_replicas_path,
            "statusReplicasPath": info.scale.status_replicas_path,
        }
        if info.scale.label_selector_path:
            scale["labelSelectorPath"] = info.scale.label_selector_path
        subresources["scale"] = scale
    columns = [
        {
            "name": col.name,
            "type": col.type,
            "jsonPath": col.json_path,
            **({"description": col.description} if col.description else {}),
            **({"priority": col.priority} if col.priority else {}),
        }
        for col in info.printer_columns
    ]
    names: dict[str, Any] = {"kind": info.kind, "listKind": f"{info.kind}List", "plural": info.plural,
                             "singular": info.kind.lower()}
    if info.short_names:
        names["shortNames"] = info.short_names
    if info.categories:
        names["categories"] = info.categories
    version: dict[str, Any] = {
        "name": info.version,
        "served": True,
        "storage": True,
        "schema": {"openAPIV3Schema": openapi_schema(model)},
        "subresources": subresources,
    }
    if columns:
        version["additionalPrinterColumns"] = columns
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": info.crd_name, "labels": {"app.kubernetes.io/part-of": "servingops"}},
        "spec": {"group": info.group, "names": names, "scope": info.scope, "versions": [version]},
    }


def render(model: type[KubeResource]) -> str:
    header = "# Generated by `servingops crds` from api_models; do not edit by hand.\n"
    return header + yaml.safe_dump(crd_manifest(model), sort_keys=False, width=120, allow_unicode=True)


def manifest_path(out_dir: Path, model: type[KubeResource]) -> Path:
    return out_dir / f"{model.crd.group}_{model.crd.plural}.yaml"


def write_crds(out_dir: Path, models: list[type[KubeResource]]) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for model in models:
        path = manifest_path(out_dir, model)
        path.write_text(render(model))
        written.append(path)
    return written
