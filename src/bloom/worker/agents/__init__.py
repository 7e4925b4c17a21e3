"""Agent CLIs behind one boundary (`base.AgentCli`), one adapter each; the process runner they
share (`process`); the registry of those this worker knows (`registry`). docs/agents.md."""
