"""The runtime's web dashboard at `/`: server-rendered pages over the runtime's services, htmx
for live parts, static files served from this package (see docs/architecture.md)."""
