"""The node agent: copies ModelPack artifacts from the registry onto its node's disk and reports per-node state.

One process per node (a DaemonSet in production, one process per kwok node locally). It never talks to
Temporal and never writes a model's status: it labels its Node and writes its own report ConfigMap, which
the delivery workflow aggregates into status.nodesReady / nodesFailed.
"""
