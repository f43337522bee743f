"""Activities: every side effect of servingops, grouped by what they touch.

Each is idempotent (a retry after a crash does no harm). Workflows import only their input and
output types and their names.
"""
