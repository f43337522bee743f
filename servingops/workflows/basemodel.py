"""BaseModelWorkflow: one per BaseModel / ClusterBaseModel / FineTunedWeight
(id basemodel/<ns or _cluster>/<name>/<uid>): the weights delivered to the nodes that serve them.

By storage.storageUri:
- hf://org/repo[@rev]: imported once into the registry as a ModelPack artifact by the import steps
  ModelWorkflow uses (workflows/import_steps.py: resolve, fetch with resume, dedup, inspect, push);
  the inspection fills the spec fields the user left empty (modelType, modelArchitecture, ...);
- modelpack://registry/repo[:tag]: the tag resolved to a digest (the agents pull digests only);
- then the object is annotated `servingops.io/artifact: <registry>/<repository>@sha256:...` and the
  node agents copy it; local://path gets no annotation (the agents only report presence);
- pvc://name/sub/path: no copy; the claim is checked and SourceReachable / Ready set (the only
  kind seed 004 gives conditions);
- any other scheme: state Failed, Ready=False UnsupportedStorage / InvalidStorageUri naming it, and a
  Warning Event.

The agents' per-node reports (ConfigMaps) are read by an activity: every FAST_POLL while copies are
in transit, every SLOW_POLL once every reporting node is Ready or Failed, and at once on a
`node-report` signal. The workflow polls rather than waiting for the bridge to watch ConfigMaps: the
bridge watches served kinds only and keeps no per-node state, and a poll of one list is cheap; the
slow poll also notices a node that leaves, fails a re-verification or joins the selection.

Delivery acts on a generation once: writing the spec fields bumps the generation, and the workflow
takes the generation that write returned as acted, so its own write never loops back as a change. A
later spec edit that changes the storage (URI, key, secret key) delivers again; any other edit only
moves observedGeneration.

Deletion: a finalizer; on delete the artifact this workflow imported (hf:// only: a modelpack://
artifact is the user's) leaves the registry unless another model reports the same digest, then the
finalizer goes. The agents remove their copies on their own when the object is gone.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError

from servingops.workflows import options
from servingops.workflows.entity import EntityWorkflow, ReconcileState

with workflow.unsafe.imports_passed_through():
    from servingops.activities.basemodels.activities import BaseModelActivities
    from servingops.activities.basemodels.aggregate import NodesSummary, summarise
    from servingops.activities.basemodels.metadata import derive
    from servingops.activities.basemodels.storage import BadStorage, StorageScheme, StorageSource, parse_storage_uri
    from servingops.activities.basemodels.types import (
        AnnotateInput,
        BaseModelView,
        FillSpecInput,
        NodeReportsInput,
        PvcInput,
        ResolveTagInput,
    )
    from servingops.activities.kubernetes import (
        ArtifactReferences,
        EventNote,
        FinalizerChange,
        KubernetesActivities,
        StatusPatch,
    )
    from servingops.activities.oci.activities import DeleteArtifactInput, OciActivities, RegistryTarget
    from servingops.api_models.contract import Signal, StartObject, WorkflowType
    from servingops.api_models.errors import ErrorType, error_message, error_type_of
    from servingops.api_models.ome.enums import LifeCycleState
    from servingops.api_models.ome.models import ModelStatusSpec
    from servingops.api_models.refs import ConditionUpdate
    from servingops.workflows.import_steps import FileProgress, ImportSteps, TokenSecret

FINALIZER = "servingops.io/basemodel-cleanup"
FAST_POLL = timedelta(seconds=5)
"""Reports re-read this often while copies are in transit (a user waits for Ready)."""
SLOW_POLL = timedelta(seconds=60)
"""Reports (or the PVC) re-read this often once settled."""
RECONCILE_PERIOD = timedelta(minutes=5)
"""status.lastReconcileTime is written at least this often while nothing changes (the seed's liveness
signal): the period an operator compares it with. Not on every slow poll: that would be a status write
a minute per model for a value nobody reads that closely."""
MAX_POLLS_PER_RUN = 400
"""A run continues as new after this many polls (a few thousand events), whatever the server says."""
PENDING, DELETING = "Pending", "Deleting"


class BaseModelState(ReconcileState):
    """What the `state` query answers."""

    phase: str = PENDING
    """The status.state written last (a LifeCycleState value), or Pending / Deleting."""
    reason: str = ""
    message: str = ""
    delivered: str | None = None
    """The storage (uri, key, secretKey) the current delivery is for."""
    scheme: StorageScheme | None = None
    """The delivered scheme, None when the URI was refused."""
    artifact: str | None = None
    """The annotated reference <registry>/<repository>@sha256:..."""
    digest: str | None = None
    imported: bool = False
    """The artifact is this workflow's import (deleted with the object), not the user's."""
    importing: bool = False
    """An import has started and not published: the blobs it uploaded belong to no manifest yet."""
    owned: list[str] = []
    """Digests of every artifact this workflow imported (a storage edit can leave an earlier one):
    each leaves the registry with the object, unless another model holds it."""
    registry: RegistryTarget | None = None
    host_task_queue: str | None = None
    resolved_revision: str | None = None
    files: list[FileProgress] = []
    progress_percent: int = 0
    filled: list[str] = []
    """Spec fields the inspection filled."""
    nodes: NodesSummary | None = None
    polls: int = 0
    last_write: str | None = None
    """When status was last written (ISO time): lastReconcileTime moves at least every SLOW_POLL."""


class BaseModelRun(StartObject):
    carried: BaseModelState | None = None


def _storage_key(storage: dict[str, object]) -> str:
    params = storage.get("parameters") or {}
    secret_key = params.get("secretKey") if isinstance(params, dict) else None
    return f"{storage.get('storageUri')}|{storage.get('key')}|{secret_key}"


@workflow.defn(name=WorkflowType.BASE_MODEL)
class BaseModelWorkflow(EntityWorkflow[BaseModelState]):
    deleted_phase = DELETING

    def __init__(self) -> None:
        super().__init__(BaseModelState())
        self.steps: ImportSteps | None = None
        self._report_now = False
        self._read_due = False
        """The object is read at the next pass whatever its generation (a new workflow's first pass)."""

    @workflow.signal(name=Signal.NODE_REPORT)
    def node_report(self) -> None:
        self._report_now = True

    # -- main ------------------------------------------------------------------------------------

    @workflow.run
    async def run(self, start: BaseModelRun) -> BaseModelState:
        self.begin(start, start.carried)
        self.steps = ImportSteps(start.ref, self.state, self._write_progress)
        if not self.continued:
            present = await workflow.execute_activity_method(
                KubernetesActivities.ensure_finalizer, FinalizerChange(ref=start.ref, finalizer=FINALIZER),
                **options.KUBE)
            if not present:
                return self.gone()
        self._read_due = not self.continued
        return await self.live()

    # -- the entity loop's hooks (workflows/entity.py) -------------------------------------------
    # A BaseModel's pass ends with its rest and the next one begins with the continue-as-new check:
    # the order its commands have always had, so its pause between two passes is empty.

    async def next_pass(self, timed_out: bool) -> bool:
        return await self._poll()

    async def pause(self) -> bool:
        return False

    def rest_time(self) -> timedelta:
        return FAST_POLL if self._in_transit() else SLOW_POLL

    def woken(self) -> bool:
        return self._report_now

    def run_is_full(self) -> bool:
        return self.state.polls >= MAX_POLLS_PER_RUN

    def reset_run_counts(self) -> None:
        self.state.polls = 0

    async def closing(self) -> None:
        await self._cleanup()

    async def _poll(self) -> bool:
        """Deliver what a newer spec names (and look again after a delivery), else observe the nodes
        and rest; False once the BaseModel is gone or going."""
        assert self.ref is not None
        self.continue_if_due()
        if self._read_due or self.behind():
            self._read_due = False
            view = await workflow.execute_activity_method(BaseModelActivities.read, self.ref, **options.KUBE)
            if view is None or view.deleting:
                # Gone without a delete we saw (someone removed the finalizer): clean up all the same.
                self.state.deleting = True
                return False
            self.state.generation = max(self.state.generation, view.generation)
            if _storage_key(view.storage) != self.state.delivered:
                await self._deliver_unless_deleted(view)
                return not self.state.deleting
            self.state.acted_generation = max(self.state.acted_generation, view.generation)
            if self.state.phase in LifeCycleState.__members__.values():
                # Nothing to deliver again, but the edit is seen: observedGeneration says so.
                await self._write(LifeCycleState(self.state.phase), self.state.reason, self.state.message)
        await self._observe()
        await self.rest()
        self.state.polls += 1
        return not self.state.deleting

    def _in_transit(self) -> bool:
        if self.state.scheme in (StorageScheme.HF, StorageScheme.MODELPACK, StorageScheme.LOCAL):
            return self.state.nodes is None or not self.state.nodes.settled
        return False

    # -- delivery --------------------------------------------------------------------------------

    async def _deliver_unless_deleted(self, view: BaseModelView) -> None:
        """Deliver; a delete meanwhile cancels the delivery (the cleanup removes what it pushed)."""
        delivering = asyncio.ensure_future(self._deliver(view))
        await workflow.wait_condition(lambda: self.state.deleting or delivering.done())
        if not delivering.done():
            delivering.cancel()
        try:
            await delivering
        except asyncio.CancelledError:
            pass
        except ActivityError as exc:
            if not self.state.deleting:
                raise
            del exc  # cancelled by the delete: the cleanup goes on

    async def _deliver(self, view: BaseModelView) -> None:
        assert self.ref is not None
        self.state.delivered = _storage_key(view.storage)
        self.state.acted_generation = max(self.state.acted_generation, view.generation)
        self.state.nodes = None
        uri = str(view.storage.get("storageUri") or "")
        try:
            source = parse_storage_uri(uri)
        except BadStorage as bad:
            self.state.scheme = None
            await self._write(LifeCycleState.FAILED, bad.reason.value, bad.message, ready="False")
            return
        self.state.scheme = source.scheme
        try:
            if source.scheme is StorageScheme.HF:
                await self._import(view, source)
            elif source.scheme is StorageScheme.MODELPACK:
                await self._resolve_modelpack(source)
            elif source.scheme is StorageScheme.LOCAL:
                await self._annotate(None)
                self.state.artifact = self.state.digest = None
                await self._write(LifeCycleState.IN_TRANSIT, "AwaitingNodes",
                                  f"waiting for the node agents to find {source.path} on the selected nodes")
            else:
                await self._annotate(None)
                self.state.artifact = self.state.digest = None
        except ActivityError as exc:
            if self.state.deleting:
                raise
            self.state.scheme = None
            if self.state.importing:
                self.state.importing = False
                await self._steps.delete_uploaded_blobs()
            error = error_type_of(exc)
            reason = error.value if error is not None and error.permanent else ErrorType.IMPORT_GAVE_UP.value
            await self._write(LifeCycleState.FAILED, reason, error_message(exc), ready="False")

    async def _import(self, view: BaseModelView, source: StorageSource) -> None:
        """hf://: the import steps, then the spec fields the inspection states, then the annotation."""
        assert self.ref is not None
        steps = self._steps
        key = view.storage.get("key")
        params = view.storage.get("parameters") or {}
        token = (TokenSecret(name=str(key), namespace=view.secret_namespace,
                             key=params.get("secretKey") if isinstance(params, dict) else None)
                 if key else None)
        self.state.importing = True
        await self._write(LifeCycleState.IMPORTING, "Importing", f"importing {source.hf_url()}")
        claim = steps.claim = await steps.claim_host()
        self.state.host_task_queue = claim.task_queue
        self.state.registry = claim.registry
        listing = await steps.resolve(source.hf_url(), token)
        self.state.resolved_revision = listing.resolved_revision
        await self._write(LifeCycleState.IMPORTING, "Importing",
                          f"{listing.locator}@{listing.resolved_revision}: {len(listing.files)} files, "
                          f"{listing.total_size} bytes")
        await steps.plan_files(claim, listing)
        model_dir = await steps.transfer(claim, listing, token)
        inspection = await steps.inspect(claim, model_dir, listing.provider, listing.provider_info)
        artifact = await steps.publish(claim, inspection, name=self.ref.name, revision=listing.resolved_revision,
                                       tag=self._tag())
        self.state.imported, self.state.importing = True, False
        self.state.owned = [*[d for d in self.state.owned if d != artifact.digest], artifact.digest]
        self.state.progress_percent = 100
        await steps.clean_spool(claim.task_queue)
        if view.fills_metadata:
            derived = derive(inspection.format.value, inspection.resolved.model_dump(by_alias=True, mode="json"))
            filled = await workflow.execute_activity_method(
                BaseModelActivities.fill_spec, FillSpecInput(ref=self.ref, derived=derived), **options.KUBE)
            self.state.filled = filled.filled
            if filled.generation is not None:
                # Our own write moved the generation: acted, so the bridge's echo is no change.
                self.state.generation = max(self.state.generation, filled.generation)
                self.state.acted_generation = max(self.state.acted_generation, filled.generation)
        await self._publish_artifact(artifact.reference, artifact.digest)

    async def _resolve_modelpack(self, source: StorageSource) -> None:
        assert source.registry is not None and source.repository is not None
        own = self.state.registry or (await self._steps.claim_host()).registry
        self.state.registry = own
        same = own.address == source.registry
        target = RegistryTarget(address=source.registry, repository=source.repository,
                                insecure=own.insecure if same else False,
                                credentials_secret=own.credentials_secret if same else None)
        digest = source.digest
        if digest is None:
            assert source.tag is not None
            # A tag that is not there is SourceNotFound (permanent): _deliver writes it as Failed.
            digest = await workflow.execute_activity_method(
                BaseModelActivities.resolve_tag, ResolveTagInput(target=target, tag=source.tag), **options.QUICK)
        self.state.imported = False
        await self._publish_artifact(f"{source.registry}/{source.repository}@{digest}", digest)

    async def _publish_artifact(self, reference: str, digest: str) -> None:
        self.state.artifact, self.state.digest = reference, digest
        await self._annotate(reference)
        await self._write(LifeCycleState.IN_TRANSIT, "AwaitingNodes",
                          f"{reference}: waiting for the node agents to copy it")

    async def _annotate(self, value: str | None) -> None:
        assert self.ref is not None
        await workflow.execute_activity_method(
            BaseModelActivities.annotate, AnnotateInput(ref=self.ref, value=value), **options.KUBE)

    def _tag(self) -> str:
        assert self.ref is not None and self.ref.uid
        return f"ome.{self.ref.kind.lower()}.{self.ref.namespace or 'cluster'}.{self.ref.name}.{self.ref.uid}"[:128]

    @property
    def _steps(self) -> ImportSteps:
        assert self.steps is not None
        return self.steps

    # -- observing -------------------------------------------------------------------------------

    async def _observe(self) -> None:
        """The nodes' reports (or the PVC) now, written when they changed or SLOW_POLL has passed."""
        assert self.ref is not None
        self._report_now = False
        if self.state.scheme is StorageScheme.PVC:
            await self._check_pvc()
            return
        if self.state.scheme not in (StorageScheme.HF, StorageScheme.MODELPACK, StorageScheme.LOCAL):
            return
        entries = await workflow.execute_activity_method(
            BaseModelActivities.node_reports,
            NodeReportsInput(kind=self.ref.kind, namespace=self.ref.namespace, name=self.ref.name), **options.KUBE)
        summary = summarise(entries, None if self.state.scheme is StorageScheme.LOCAL else self.state.digest)
        previous = self.state.nodes
        self.state.nodes = summary
        changed = previous is None or (previous.nodes_ready, previous.nodes_failed, previous.state) != (
            summary.nodes_ready, summary.nodes_failed, summary.state)
        if not changed and not self._reconcile_due():
            return
        reason, message = self._nodes_message(summary)
        await self._write(summary.state, reason, message,
                          fields=ModelStatusSpec(nodes_ready=summary.nodes_ready, nodes_failed=summary.nodes_failed))

    def _nodes_message(self, summary: NodesSummary) -> tuple[str, str]:
        counts = (f"{len(summary.nodes_ready)} ready, {len(summary.nodes_failed)} failed, "
                  f"{len(summary.nodes_updating)} in transit")
        if summary.state is LifeCycleState.READY:
            return "NodesReady", f"{counts}: {', '.join(summary.nodes_ready)}"
        if summary.state is LifeCycleState.FAILED:
            failed = "; ".join(f"{node}: {summary.failures.get(node) or 'failed'}" for node in summary.nodes_failed[:3])
            return "NodesFailed", f"{counts}; {failed}"
        return "AwaitingNodes", f"{counts}" if summary.nodes_updating else "no node agent has reported yet"

    async def _check_pvc(self) -> None:
        """pvc://: SourceReachable and Ready from the claim (a ClusterBaseModel's or FineTunedWeight's
        claim is looked up in storage.parameters.namespace, else the controller namespace)."""
        assert self.ref is not None
        view = await workflow.execute_activity_method(BaseModelActivities.read, self.ref, **options.KUBE)
        if view is None:
            return
        source = parse_storage_uri(str(view.storage.get("storageUri") or ""))
        params = view.storage.get("parameters") or {}
        namespace = self.ref.namespace or (params.get("namespace") if isinstance(params, dict) else None) \
            or view.secret_namespace
        assert source.pvc_name is not None
        check = await workflow.execute_activity_method(
            BaseModelActivities.check_pvc, PvcInput(namespace=namespace, name=source.pvc_name), **options.KUBE)
        where = f"PersistentVolumeClaim {namespace}/{source.pvc_name}"
        if not check.found:
            state, reachable, reason, message = LifeCycleState.FAILED, "False", "PVCNotFound", f"{where} does not exist"
        elif check.phase != "Bound":
            state, reachable, reason, message = (LifeCycleState.IN_TRANSIT, "False", "PVCNotBound",
                                                 f"{where} is {check.phase or 'not bound'}")
        else:
            state, reachable, reason, message = LifeCycleState.READY, "True", "PVCBound", \
                f"{where} is Bound; pods mount /{source.sub_path}"
        if (state.value, reason, message) == (self.state.phase, self.state.reason, self.state.message) \
                and not self._reconcile_due():
            return
        await self._write(state, reason, message, ready="True" if state is LifeCycleState.READY else "False",
                          extra=[ConditionUpdate(type="SourceReachable", status=reachable, reason=reason,
                                                 message=message)])

    def _reconcile_due(self) -> bool:
        if self.state.last_write is None:
            return True
        return workflow.now() - datetime.fromisoformat(self.state.last_write) >= RECONCILE_PERIOD

    # -- deletion --------------------------------------------------------------------------------

    async def _cleanup(self) -> None:
        assert self.ref is not None and self.ref.uid
        self.state.phase = DELETING
        assert self.visibility is not None
        self.visibility.publish(DELETING)
        steps = self._steps
        for digest in self.state.owned if self.state.registry is not None else []:
            assert self.state.registry is not None
            shared = await workflow.execute_activity_method(
                KubernetesActivities.artifact_referenced,
                ArtifactReferences(digest=digest, except_uid=self.ref.uid), **options.KUBE)
            if not shared:
                await workflow.execute_activity_method(
                    OciActivities.delete_artifact,
                    DeleteArtifactInput(target=self.state.registry, digest=digest), **options.QUICK)
        if self.state.importing:
            await steps.delete_uploaded_blobs()  # an import cut short by the delete
        if self.state.host_task_queue:
            await steps.clean_spool(self.state.host_task_queue)
        await workflow.execute_activity_method(
            KubernetesActivities.remove_finalizer, FinalizerChange(ref=self.ref, finalizer=FINALIZER), **options.KUBE)

    # -- status ----------------------------------------------------------------------------------

    async def _write_progress(self, percent: int) -> None:
        phase = LifeCycleState(self.state.phase) if self.state.phase in LifeCycleState.__members__.values() \
            else LifeCycleState.IMPORTING
        await self._write(phase, self.state.reason, f"importing: {percent}% of the files in the registry")

    async def _write(self, state: LifeCycleState, reason: str, message: str, *, ready: str | None = None,
                     fields: ModelStatusSpec | None = None, extra: list[ConditionUpdate] | None = None) -> None:
        """status.state, observedGeneration, lastReconcileTime (and `fields`); a Ready condition only
        where one is due (a refused or failed delivery, pvc://). A change of state or reason is an
        Event: Warning when Failed."""
        assert self.ref is not None and self.visibility is not None
        changed = (state.value, reason) != (self.state.phase, self.state.reason)
        self.state.phase, self.state.reason, self.state.message = state.value, reason, message
        self.visibility.publish(state.value)
        now = workflow.now().replace(microsecond=0)
        self.state.last_write = now.isoformat()
        status = fields if fields is not None else ModelStatusSpec()
        status.state = state
        status.observed_generation = self.state.acted_generation
        status.last_reconcile_time = now
        conditions = list(extra or [])
        if ready is not None:
            conditions.append(ConditionUpdate(type="Ready", status=ready, reason=reason, message=message))
        kind = "Warning" if state is LifeCycleState.FAILED else "Normal"
        await workflow.execute_activity_method(
            KubernetesActivities.patch_status,
            StatusPatch(ref=self.ref, status=status.to_merge_patch(), conditions=conditions,
                        events=[EventNote(type=kind, reason=reason, message=message)] if changed else []),
            **options.KUBE,
        )


__all__ = ["FAST_POLL", "FINALIZER", "RECONCILE_PERIOD", "SLOW_POLL", "BaseModelRun", "BaseModelState",
           "BaseModelWorkflow"]
