"""Controller-owned upload sessions for Models and ClusterModels with `spec.source.upload: {}`.

- `types`: the activity inputs/outputs and the `upload-complete` signal payload (what workflows import);
- `sessions`: the session (the user's Secret, and the record the endpoint reads) and the activities
  upload.open_session, upload.close_session and upload.prepare_model_dir (`UploadActivities(...).all()`);
  the record itself, its signing and its check are clients/upload_sessions.py, shared with the endpoint;

The HTTP endpoint itself (`UploadServer`, which the worker process serves and which signals the model
workflow when an upload is complete) is not an activity: it lives in `ingress/uploads.py`.

Workflows import `activities.uploads.types` only: this package's __init__ imports nothing, so importing the
types never pulls the Kubernetes client into the workflow sandbox.
"""
