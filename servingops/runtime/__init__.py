"""Process plumbing shared by the worker, the bridge and the CLI: how to reach Temporal and
Kubernetes, and telemetry. Nothing here decides anything."""
