"""Workflows: the deterministic state machines of servingops.

No I/O, no wall clock, no randomness here: every side effect is an activity. Imports are limited
to temporalio, the API models and activity signatures (checked by import-linter).
"""
