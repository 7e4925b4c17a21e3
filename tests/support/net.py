import socket


def closed_port() -> int:
    """A port nothing listens on (bound briefly, then released, and left alone)."""
    return free_port()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
