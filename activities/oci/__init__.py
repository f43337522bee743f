"""OCI registry activities: publish a model directory as a CNCF ModelPack artifact.

`media_types` names every media type, `modelpack` builds config and manifest bytes (pure),
`registry_client` extends oras-py for streaming, resumable uploads, `activities` wraps them as
Temporal activities.
"""
