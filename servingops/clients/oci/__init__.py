"""OCI registries: the client and the CNCF ModelPack format that the import publishes and the node agent pulls.

`media_types` names every media type, `modelpack` builds config and manifest bytes (pure),
`registry_client` extends oras-py for streaming, resumable uploads, `credentials` reads registry credentials
from a Secret's data. The activities that publish (activities/oci/) wrap them.
"""
