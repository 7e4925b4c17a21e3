"""The `/api/runtime/*` routes: thin adapters that parse, call one service and map the result."""
