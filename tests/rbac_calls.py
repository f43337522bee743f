"""What each process asks of the apiserver, read from its code: (API group, resource, verb) triples.

Each process hands its ApiClient to one entry point: the worker to `workers.registry.activities`,
the upload endpoint to `ingress.uploads.UploadServer`, the bridge to `crd_bridge.main.run`. From
an entry point this walks every top-level function and class it refers to, in servingops' own
modules and in the client library's leader election, and collects each Kubernetes client method
the reached code names (called or passed on, as `watch.stream(api.list_x)` does). The generated
client says which HTTP method and path each method uses, which gives the verb and the resource:
that is what RBAC authorizes. A call whose group or plural is a variable (the activities act on
whichever served kind a workflow names) stands for every kind the process may be given.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from kubernetes import client as kube_client

from servingops.api_models import contract
from servingops.api_models.deckhouse import ClusterModel, Model
from servingops.api_models.ome.model_keys import GROUP, ModelKind
from servingops.crd_bridge.routes import ROUTES

Triple = tuple[str, str, str]
"""(API group, resource[/subresource], verb)."""

ENTRY_POINTS = {
    "worker": ("servingops.workers.registry", "activities"),
    "uploads": ("servingops.ingress.uploads", "UploadServer"),
    "bridge": ("servingops.crd_bridge.main", "run"),
    "agent": ("servingops.agents.main", "run"),
    "webhook": ("servingops.ingress.model_webhook", "run"),
    "admission": ("servingops.admission.main", "run"),
    "catalog-endpoint": ("servingops.ingress.catalog_endpoint", "run"),
    # Not a process: the identity the control plane's placement activities talk as in a member
    # cluster (the chart's placementMember role), through a client built from the member's kubeconfig.
    "placement-member": ("servingops.activities.placement.member", "MemberClient"),
}
"""Where each identity's ApiClient goes: everything reachable from here talks as that identity."""

_OTHER_IDENTITY = {"servingops.activities.placement.member"}
"""Modules whose calls go out under an identity of their own: a walk from another entry point
does not count them (the worker builds a MemberClient, but the member's apiserver sees the
placement-member identity)."""

_FOLLOWED_LIBRARIES = ("kubernetes.leaderelection",)
"""Library code that makes apiserver calls on our behalf with a client we give it (LeaseLock)."""

_SERIALIZE = re.compile(r"def _(\w+)_serialize\(.*?method='(\w+)',\s*resource_path='([^']+)'", re.S)


@dataclass(frozen=True)
class Endpoint:
    """One generated client method: its HTTP method and path template."""

    method: str
    path: str

    def group_and_rest(self) -> tuple[str, list[str]]:
        parts = self.path.strip("/").split("/")
        if parts[0] == "api":
            return "", parts[2:]
        return parts[1], parts[3:]

    def triple(self, group: str | None = None, plural: str | None = None, watch: bool = False) -> Triple:
        api_group, rest = self.group_and_rest()
        if api_group == "{group}":
            assert group is not None
            api_group = group
        if rest[:2] == ["namespaces", "{namespace}"] and len(rest) > 2:
            rest = rest[2:]
        resource = plural if rest[0] == "{plural}" else rest[0]
        assert resource is not None
        named = len(rest) > 1
        if len(rest) > 2:
            resource = f"{resource}/{rest[2]}"
        verb = {"GET": "get" if named else ("watch" if watch else "list"), "POST": "create", "PUT": "update",
                "PATCH": "patch", "DELETE": "delete" if named else "deletecollection"}[self.method]
        return api_group, resource, verb


def client_endpoints(api_classes: Iterable[str]) -> dict[str, Endpoint]:
    """Method name -> endpoint, over the named generated API classes (CoreV1Api, ...)."""
    endpoints: dict[str, Endpoint] = {}
    for name in api_classes:
        source = inspect.getsource(inspect.getmodule(getattr(kube_client, name)))  # type: ignore[arg-type]
        for method, http, path in _SERIALIZE.findall(source):
            if not Endpoint(http, path).group_and_rest()[1]:
                continue  # discovery (get_api_resources): no resource, every client may call it
            known = endpoints.get(method)
            if known is not None and known != Endpoint(http, path):
                raise AssertionError(f"{method} means two things among {sorted(api_classes)}")
            endpoints[method] = Endpoint(http, path)
    return endpoints


@dataclass
class _Module:
    module: ModuleType
    tree: ast.Module
    definitions: dict[str, ast.AST]
    imports: dict[str, tuple[str, str]]
    constants: dict[str, Any]


_modules: dict[str, _Module] = {}


def _load(name: str) -> _Module:
    if name not in _modules:
        module = importlib.import_module(name)
        tree = ast.parse(Path(inspect.getfile(module)).read_text())
        definitions: dict[str, ast.AST] = {}
        imports: dict[str, tuple[str, str]] = {}
        constants: dict[str, Any] = {}
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                definitions[node.name] = node
            elif isinstance(node, ast.ImportFrom) and node.module:
                for alias in node.names:
                    imports[alias.asname or alias.name] = (node.module, alias.name)
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    if node.value is None:
                        continue
                    pairs: list[tuple[ast.AST, ast.AST]] = [(target, node.value)]
                    if isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple):
                        pairs = list(zip(target.elts, node.value.elts, strict=False))  # `_A, _B = "a", "b"`
                    for bound, value in pairs:
                        if isinstance(bound, ast.Name):
                            try:
                                constants[bound.id] = ast.literal_eval(value)
                            except ValueError:
                                pass
        _modules[name] = _Module(module, tree, definitions, imports, constants)
    return _modules[name]


def _followed(module: str) -> bool:
    return module.startswith("servingops.") or module.startswith(_FOLLOWED_LIBRARIES)


def reachable(entry: tuple[str, str]) -> list[tuple[_Module, ast.AST]]:
    """Every top-level definition reachable from `entry` by name, with the module holding it."""
    seen: set[tuple[str, str]] = set()
    todo = [entry]
    found: list[tuple[_Module, ast.AST]] = []
    while todo:
        module_name, name = todo.pop()
        if (module_name, name) in seen:
            continue
        seen.add((module_name, name))
        if module_name in _OTHER_IDENTITY and module_name != entry[0]:
            continue
        module = _load(module_name)
        node = module.definitions.get(name)
        if node is None:
            # A re-export (or a submodule named in `from package import module`).
            if name in module.imports and _followed(module.imports[name][0]):
                todo.append(module.imports[name])
            continue
        found.append((module, node))
        for ref in ast.walk(node):
            if isinstance(ref, ast.Name):
                if ref.id in module.definitions:
                    todo.append((module_name, ref.id))
                elif ref.id in module.imports and _followed(module.imports[ref.id][0]):
                    todo.append(module.imports[ref.id])
    return found


def _api_classes(nodes: Iterable[tuple[_Module, ast.AST]]) -> set[str]:
    """The generated API classes the reached code instantiates (client.CoreV1Api(...), ...)."""
    names = set()
    for _, node in nodes:
        for ref in ast.walk(node):
            if (isinstance(ref, ast.Call) and isinstance(ref.func, ast.Attribute) and ref.func.attr.endswith("Api")
                    and hasattr(kube_client, ref.func.attr)):
                names.add(ref.func.attr)
    return names


def _loop_values(function: ast.AST, module: _Module, name: str, arg: ast.AST) -> set[str] | None:
    """The values a loop variable takes when the loop runs over a module constant of tuples:
    `for group, version, plural in _HOLDERS:`."""
    for loop in ast.walk(function):
        if not (isinstance(loop, ast.For) and isinstance(loop.iter, ast.Name) and isinstance(loop.target, ast.Tuple)
                and any(arg is n for n in ast.walk(loop))):
            continue
        items = module.constants.get(loop.iter.id)
        names = [t.id if isinstance(t, ast.Name) else None for t in loop.target.elts]
        if items is not None and name in names:
            return {str(item[names.index(name)]) for item in items}
    return None


def _values(arg: ast.AST, function: ast.AST, module: _Module) -> set[str] | None:
    """What a group or plural argument can be, or None when it comes from a variable (any kind)."""
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return {arg.value}
    if isinstance(arg, ast.Name):
        if isinstance(module.constants.get(arg.id), str):
            return {module.constants[arg.id]}
        return _loop_values(function, module, arg.id, arg)
    return None


@dataclass(frozen=True)
class Kind:
    group: str
    plural: str


def process_kinds(process: str) -> list[Kind]:
    """The kinds a variable group/plural may name in `process`: for the bridge every routed kind
    (--kinds picks among them); for the worker the kinds whose workflows it serves."""
    if process == "agent":
        # agents/watch.py watches every model kind whose weights go to nodes.
        return [Kind(GROUP, kind.plural) for kind in ModelKind]
    if process == "webhook":
        # ingress/model_webhook.py reads the Model or ClusterModel a workload names.
        return [Kind(kind.crd.group, kind.crd.plural) for kind in (Model, ClusterModel)]
    if process == "catalog-endpoint":
        # ingress/catalog_endpoint.py (KubeClusterModels) lists the ClusterModels it publishes.
        return [Kind(ClusterModel.crd.group, ClusterModel.crd.plural)]
    routes = list(ROUTES.values())
    if process == "worker":
        # A TrafficMap's events go to its InferenceService's routing workflow, whose generic activities act
        # on the InferenceService (already listed), never on the map: its own calls name it literally.
        routes = [r for r in routes if r.workflow_type in contract.IMPLEMENTED_WORKFLOWS and not r.owner_routing]
    elif process != "bridge":
        return []
    return [Kind(r.group, r.plural) for r in routes]


def _custom_args(args: list[ast.expr], method: str) -> tuple[ast.AST | None, ast.AST | None]:
    """The group and plural arguments of a CustomObjectsApi call."""
    plural_at = 3 if "_namespaced_" in method else 2
    return (args[0] if args else None), (args[plural_at] if len(args) > plural_at else None)


_LAYER_APPLY = "apply"
"""clients/kube/calls.apply: server-side apply through the patch method handed to it."""


def used(process: str) -> set[Triple]:
    """Every (group, resource, verb) the process's code may ask for."""
    nodes = reachable(ENTRY_POINTS[process])
    endpoints = client_endpoints(_api_classes(nodes))
    triples: set[Triple] = set()
    for module, top in nodes:
        parents = {child: parent for parent in ast.walk(top) for child in ast.iter_child_nodes(parent)}
        for ref in ast.walk(top):
            if not (isinstance(ref, ast.Attribute) and ref.attr in endpoints):
                continue
            triples |= set(_triples_of(ref, parents, endpoints[ref.attr], module, top, process))
    return triples


def _triples_of(ref: ast.Attribute, parents: dict[ast.AST, ast.AST], endpoint: Endpoint, module: _Module,
                top: ast.AST, process: str) -> Iterator[Triple]:
    parent = parents.get(ref)
    called = isinstance(parent, ast.Call) and parent.func is ref
    # Passed to watch.Watch().stream(...): a watch of that list.
    watch = (isinstance(parent, ast.Call) and isinstance(parent.func, ast.Attribute)
             and parent.func.attr == "stream" and ref in parent.args)
    # Handed to the access layer with its arguments (clients/kube: `get_or_none(api.read_x, name, namespace)`),
    # which calls it with them: read the arguments after the method as the call's.
    handed = (isinstance(parent, ast.Call) and not called and not watch and bool(parent.args)
              and parent.args[0] is ref)
    args: list[ast.expr] = []
    if called:
        args = list(parent.args)  # type: ignore[union-attr]
    elif handed:
        args = list(parent.args[1:])  # type: ignore[union-attr]
    apply = called and any(k.arg == "_content_type" and "apply-patch" in " ".join(_values(k.value, top, module) or ())
                           for k in parent.keywords)  # type: ignore[union-attr]
    if handed:
        func = parent.func  # type: ignore[union-attr]
        apply = (func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)) == _LAYER_APPLY
    kinds: list[tuple[str | None, str | None]] = [(None, None)]
    if "{group}" in endpoint.path:
        groups = plurals = None
        if called or handed:
            group_arg, plural_arg = _custom_args(args, ref.attr)
            groups = _values(group_arg, top, module) if group_arg else None
            plurals = _values(plural_arg, top, module) if plural_arg else None
        if groups is not None and plurals is not None:
            kinds = [(g, p) for g in groups for p in plurals]
        else:
            kinds = [(k.group, k.plural) for k in process_kinds(process)]
    for group, plural in kinds:
        triple = endpoint.triple(group, plural, watch=watch)
        yield triple
        if apply:
            # Server-side apply creates the object when it is missing: RBAC checks `create` too.
            yield triple[0], triple[1], "create"


def granted(docs: Iterable[dict[str, Any]], subject: tuple[str, str]) -> tuple[set[Triple], list[dict[str, Any]]]:
    """The (group, resource, verb) triples the rendered RBAC grants the ServiceAccount `subject`
    (namespace, name), and the rules that grant them."""
    roles = {(d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"]): d
             for d in docs if d["kind"] in ("Role", "ClusterRole")}
    rules: list[dict[str, Any]] = []
    for binding in (d for d in docs if d["kind"] in ("RoleBinding", "ClusterRoleBinding")):
        if not any(s["kind"] == "ServiceAccount" and (s["namespace"], s["name"]) == subject
                   for s in binding.get("subjects") or []):
            continue
        ref = binding["roleRef"]
        namespace = binding["metadata"].get("namespace") if ref["kind"] == "Role" else None
        rules += roles[(ref["kind"], namespace, ref["name"])].get("rules") or []
    triples = {(group, resource, verb) for rule in rules for group in rule.get("apiGroups") or []
               for resource in rule.get("resources") or [] for verb in rule.get("verbs") or []}
    return triples, rules
