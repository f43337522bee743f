"""The local development stack: real Temporal, Kubernetes, registry, Prometheus and a
Hugging Face Hub-compatible server, each started on free loopback ports.

Used by the pytest fixtures and by `./dev up` / `./dev down` (devstack/cli.py). Not installed with the product.
"""
