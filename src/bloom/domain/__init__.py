"""Pure domain logic: states, routing, retry policy. No I/O; time is always passed in."""
