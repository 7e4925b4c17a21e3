"""The API reference page (Swagger UI) with its script and style served from the package, not a
CDN: it works offline, and its Content-Security-Policy names no other origin (`guards.py`)."""

from functools import cache
from importlib.resources import files

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from starlette.responses import HTMLResponse, Response

ASSETS = files("bloom.web") / "swagger_ui"  # swagger-ui-dist, vendored (its VENDORED.md)
MEDIA_TYPES = {"swagger-ui-bundle.js": "text/javascript", "swagger-ui.css": "text/css"}
NO_ICON = "data:,"  # no request for a favicon from elsewhere


@cache
def _asset(name: str) -> bytes:
    return (ASSETS / name).read_bytes()


def add_api_docs(app: FastAPI, path: str) -> None:
    """GET `path`: Swagger UI for the app's OpenAPI document; GET `path`/<file>: its assets.
    The app is made with `docs_url=None`."""
    openapi_url = app.openapi_url or ""

    def page() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=openapi_url,
            title=f"{app.title} - Swagger UI",
            swagger_js_url=f"{path}/swagger-ui-bundle.js",
            swagger_css_url=f"{path}/swagger-ui.css",
            swagger_favicon_url=NO_ICON,
        )

    def asset(name: str, media_type: str) -> None:
        def serve() -> Response:
            headers = {"Cache-Control": "public, max-age=86400"}
            return Response(_asset(name), media_type=media_type, headers=headers)

        app.add_api_route(f"{path}/{name}", serve, methods=["GET"], include_in_schema=False)

    app.add_api_route(path, page, methods=["GET"], include_in_schema=False)
    for name, media_type in MEDIA_TYPES.items():
        asset(name, media_type)
