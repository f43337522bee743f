"""The InferenceReplica engine: one workflow per replica and the pure rules it runs."""
