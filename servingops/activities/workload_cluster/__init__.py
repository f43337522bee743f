"""WorkloadCluster connection health: read a member's kubeconfig Secret and probe its apiserver."""
