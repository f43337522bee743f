"""The validating admission webhook (`servingops admission`): the rules that need more than the object itself,
answered at apply time. The controllers re-check every one of them at reconcile and stay the authority.

- `quota_tree`: the AcceleratorQuota tree rules at admission, pure (the rules are rendering/accelerator_quota.py's);
- `review`: an AdmissionReview v1 in, its answer out, pure given a `TreeReader`;
- `reader`: the `TreeReader` of the apiserver, through the access layer (clients/kube);
- `server`: the HTTPS server (TLS, paths, body limits);
- `main`: the process (flags, run).
"""
