"""The InferenceReplica engine's cluster side: Instance pods, ControllerRevisions, the headless Service."""
