"""How secrets are shown: never whole."""


def mask_secret(secret: str) -> str:
    """The seed's masking: "" stays "", up to 8 characters become "****", else `abcd****wxyz`."""
    if not secret:
        return ""
    if len(secret) <= 8:
        return "****"
    return f"{secret[:4]}****{secret[-4:]}"
