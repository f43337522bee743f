"""OCI registry activities: publish a model directory as a CNCF ModelPack artifact.

`activities` wraps the registry client and the ModelPack builders of `clients/oci/` as Temporal activities;
`resume` keeps an upload's resume point without its secret.
"""
