"""The deployment files (nginx with TLS, OpenRC and systemd services, env files, log rotation,
TLS, backup and restore scripts) and rendering them for one host: `bloom deploy render`.

The files live in `files/` (the repository's `deploy/` is that directory) and are read with
importlib.resources, so an installed package renders the same files the tests check.
"""
