"""The browser SDK (``/sdk/voiceserver.js``) and the demo page (``/``): static files
shipped in the package, read once when the app is made."""

from __future__ import annotations

from pathlib import Path

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

WEB_DIR = Path(__file__).resolve().parent.parent / "web"
JS = "text/javascript; charset=utf-8"
# The SDK and page change with the server: browsers revalidate instead of caching stale copies.
HEADERS = {"Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff"}


def _file(relative: str, media_type: str) -> Route:
    body = (WEB_DIR / relative).read_bytes()

    async def serve(request: Request) -> Response:
        return Response(body, media_type=media_type, headers=HEADERS)

    return Route("/" + relative if relative != "index.html" else "/", serve, methods=["GET"])


def web_routes(demo_page: bool) -> list[Route]:
    routes = [_file("sdk/voiceserver.js", JS)]
    if demo_page:
        routes += [
            _file("index.html", "text/html; charset=utf-8"),
            _file("demo.js", JS),
            _file("demo.css", "text/css; charset=utf-8"),
        ]
    return routes
