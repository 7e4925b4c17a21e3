"""The Gemini CLI (`@google/gemini-cli`) as an agent CLI (docs/agents.md)."""
