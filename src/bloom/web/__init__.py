"""The HTTP plumbing both servers share: guards, rate limits, request logs, client addresses,
error documentation, and the settings every process reads."""
