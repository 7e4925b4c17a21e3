"""`bloom bench`: the lease engine measured through its HTTP API (see docs/benchmarks.md)."""
