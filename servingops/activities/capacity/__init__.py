"""A workload cluster's accelerator capacity: read Nodes and Kueue ResourceFlavors, attribute nodes to
flavors (attribution.py, pure), and write status.capacity on the root AcceleratorQuota."""
