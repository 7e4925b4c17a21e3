"""The `bloom` command line."""
