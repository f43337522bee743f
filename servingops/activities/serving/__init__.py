"""The serving substrate: one Deployment and Service per revision, an HTTPRoute per component."""
