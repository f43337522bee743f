"""Stored workflow histories replayed by tests/test_replay.py, and the recorder that made them."""
