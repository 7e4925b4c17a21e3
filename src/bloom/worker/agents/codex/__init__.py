"""The Codex CLI (`@openai/codex`) as an agent CLI: docs/agents.md."""
