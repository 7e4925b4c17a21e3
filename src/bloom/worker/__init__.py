"""The worker: claims LLM tasks from the runtime and runs each with the Claude CLI."""
