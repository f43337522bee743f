"""The CRD bridge: the only way cluster events reach Temporal. It maps an event to a workflow id
and a signal, and keeps nothing else; it never writes status and never decides."""
