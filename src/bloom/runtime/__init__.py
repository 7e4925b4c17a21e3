"""The runtime server: app factory, composition root, HTTP API and background loops."""
