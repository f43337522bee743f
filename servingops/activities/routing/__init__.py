"""Routing across homes: the routing controller's reads, probes, polls and TrafficMap writes (activities.py,
http_checks.py), and the Gateway API publisher that realizes a map as a global HTTPRoute (publisher.py)."""
