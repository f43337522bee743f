"""The InferenceService's entity workflow (id isvc/<ns>/<name>/<uid>): `workflow.InferenceServiceWorkflow`.

It serves a new service's first revision, opens one rollout run (workflows/rollout/) per unit whose
revision changed, and is the single writer of the service's status. Nothing is imported here: the
worker's registry imports the workflow module it registers.
"""
