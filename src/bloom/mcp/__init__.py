"""`bloom mcp`: the fleet as tools for a Claude session (the Model Context Protocol)."""
