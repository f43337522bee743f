"""The BenchmarkJob activities (benchmark.*): read the object, start one generation's Job, read and stop it,
write the status. Every Kubernetes call goes through servingops/clients/kube/."""
