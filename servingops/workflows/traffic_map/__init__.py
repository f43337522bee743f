"""TrafficMapWorkflow (workflow.py): routing across a placed InferenceService's homes and the publication of
its global route; table.py turns one read into the routing table's inputs; state.py is what it keeps."""
