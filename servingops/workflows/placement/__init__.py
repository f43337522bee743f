"""Multi-cluster placement: the pure matching and allocation rules the placement workflow calls."""
