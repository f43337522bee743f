"""Clients and formats that the activities, the node agent and the HTTP endpoints share.

Below `activities/`: nothing here is a Temporal activity, imports one or imports temporalio (import rules in
pyproject.toml), so the node agent and the endpoints use these without taking the activities package as a
library. Errors carry an `ErrorType` (api_models/errors.py); the activities raise them as activity errors.

- `oci/`: the registry client (oras-py extended for streamed, resumable blobs), the ModelPack format, the media
  types, registry credentials from a Secret's data;
- `model_files/`: what a model directory or an upload is (safetensors, GGUF and diffusers headers, archives);
- `upload_sessions`: an upload session's signed record, which the worker writes and the upload endpoint reads;
- `catalog_remote`: the catalog endpoint's wire format and the HTTPS client of a remote catalog.
"""
