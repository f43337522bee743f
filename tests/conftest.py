"""Session-wide fixtures: each real part of the stack starts once, on free loopback ports.

Each part lives in its own plugin module under tests/fixtures/.
"""

pytest_plugins = [
    "tests.fixtures.tiers",
    "tests.fixtures.kube",
    "tests.fixtures.hub",
    "tests.fixtures.services",
    "tests.fixtures.bridge",
    "tests.fixtures.secrets",
    "tests.fixtures.metrics_adapter",
    "tests.fixtures.kueue",
    "tests.fixtures.keda",
]
