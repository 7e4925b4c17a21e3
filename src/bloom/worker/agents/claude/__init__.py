"""The Claude CLI (Anthropic's Claude Code) behind the agent-CLI boundary: `adapter.ClaudeCli`."""
