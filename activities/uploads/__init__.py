"""Controller-owned upload sessions for Models and ClusterModels with `spec.source.upload: {}`.

- `types`: the activity inputs/outputs and the `upload-complete` signal payload (what workflows import);
- `sessions`: the session Secret and the activities upload.open_session, upload.close_session and
  upload.prepare_model_dir (`UploadActivities(...).all()`);
- `server`: `UploadServer`, the HTTP endpoint the worker process serves, which signals the model workflow
  when an upload is complete.

Workflows import `activities.uploads.types` only: this package's __init__ imports nothing, so importing the
types never pulls the Kubernetes client or the HTTP server into the workflow sandbox.
"""
