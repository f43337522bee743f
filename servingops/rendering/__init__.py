"""Rendering: a spec and what it references in, the objects that serve it out, pure.

An InferenceService component becomes its pod template, revision, Deployment, Service and HTTPRoute
(render.py), a gang's leader and worker templates (multinode.py); a spec that names a model and a
runtime is first made concrete (resolution.py, over runtime_selection, runtime_inheritance,
runtime_merge and accelerator_overrides). Also here: the names of what a component is served by
(names.py), the Gateway attachment of its routes (ingress.py), who owns an OMENative component's
replica count (scaling.py) and the Kueue metadata of an Instance's pods (kueue.py).

No I/O: nothing here imports temporalio or the kubernetes client (pyproject.toml's import contracts
hold it). What a spec references comes in through resolution.Reader, which the activities implement
over an apiserver (activities/reference_reader.py; activities/placement/member.py in a member
cluster). The serving, replica and placement activities call this package; it sits below
activities/ and above api_models/.
"""
