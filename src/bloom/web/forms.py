"""HTML form bodies (`application/x-www-form-urlencoded`), read without a multipart parser."""

from urllib.parse import parse_qs

from starlette.requests import Request

MAX_FORM_BYTES = 64 * 1024
MAX_FIELDS = 40


async def read_form(request: Request, max_bytes: int = MAX_FORM_BYTES) -> dict[str, str] | None:
    """The form's fields (the first value of each), or None for a body too large or unreadable."""
    body = await request.body()
    if len(body) > max_bytes:
        return None
    try:
        fields = parse_qs(body.decode(), max_num_fields=MAX_FIELDS, strict_parsing=False)
    except (UnicodeDecodeError, ValueError):
        return None
    return {name: values[0] for name, values in fields.items()}
