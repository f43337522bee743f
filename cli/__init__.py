"""The `servingops` command line."""
