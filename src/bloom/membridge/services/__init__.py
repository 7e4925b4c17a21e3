"""Membridge's use-cases, shared by the HTTP routes (and anything else that needs them)."""
