"""The capacity report of a workload cluster's root AcceleratorQuota (report.py)."""
