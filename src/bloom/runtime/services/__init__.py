"""Use-cases shared by the HTTP API, the CLI and the loops. Each owns its transactions."""
