"""Memory sync: a project's claude-mem database kept the same on every node through the object
store (docs/memory-sync.md). Kernel level: it uses `bloom.objects` and `bloom.domain` only."""
