"""The one Kubernetes access layer: how every activity, the node agent and the HTTP endpoints call the apiserver.

Below `activities/` (in `clients/`, without Temporal), so the agent and the endpoints use it too. Each module has
one job:

- `timeouts`: the request timeouts, chosen once;
- `errors`: what an ApiException means (absent, conflict, rejected, ...) and its one mapping to the error tree;
- `calls`: one call with the timeout policy, get-or-none, delete-if-present, create-unless-exists, server-side
  apply with a field manager;
- `custom_objects`: a custom object by ObjectRef (get-or-none, replace, the optimistic update's 409 loop);
- `events`: Events on an object (aggregated, rate-limited).

A site names the generated client's method itself and hands it to the layer with its arguments
(`get_or_none(self.core.read_namespaced_secret, name, namespace)`): the method stays visible where it is used,
which is what RBAC authorizes (tests/rbac_calls.py reads the calls from the code), and the layer adds the timeout
and the error mapping.
"""
