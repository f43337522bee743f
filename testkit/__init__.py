"""What the tests and the benchmarks share: the fakes the time-skipping tests run workflows on (each
proven against the real activities by a conformance suite under tests/), the time-skipping harness,
the stacks a benchmark drives as an end-to-end test does, and the two waits with a deadline
(`waiting.wait_until`, `waiting.hold`). Not part of the product and never installed; it imports
devstack and the product, never tests or bench (the import rules in pyproject.toml)."""
