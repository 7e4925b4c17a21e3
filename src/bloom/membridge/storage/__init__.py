"""Membridge's storage: its tables, repositories and migrations."""
