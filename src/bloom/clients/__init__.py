"""Typed HTTP clients for the services the runtime talks to, with injectable transports."""
