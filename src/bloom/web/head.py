"""HEAD for every GET route (health included, as uptime monitors use it): the request is served
as a GET and its body dropped, headers (Content-Length too) kept. A route that would stream a
large body can skip making it: `is_head(scope)` tells it the body will be dropped."""

from starlette.types import ASGIApp, Message, Receive, Scope, Send

HEAD_KEY = "bloom.head"


def is_head(scope: Scope) -> bool:
    return bool(scope.get(HEAD_KEY))


class HeadAsGetMiddleware:
    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "HEAD":
            await self.app(scope, receive, send)
            return
        done = False

        async def headers_only(message: Message) -> None:
            nonlocal done
            if done:
                return  # the rest of a streamed body: the client asked for none
            if message["type"] == "http.response.body":
                done = True
                message = {"type": "http.response.body", "body": b"", "more_body": False}
            await send(message)

        await self.app({**scope, "method": "GET", HEAD_KEY: True}, receive, headers_only)
