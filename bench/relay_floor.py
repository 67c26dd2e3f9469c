"""The floor under the gateway's rerank-off latency: a bare relay on the gateway's own server and engine client.

    python bench/relay_floor.py ENGINE_URL PORT

Serves ``POST /{index}/_search`` as the gateway does when a search is off: uvicorn with the gateway's HTTP
protocol, a raw ASGI app (no Starlette, no planning, no metrics), one aiohttp session to the engine asking
for an uncompressed answer, and a constant ``jingpai`` member spliced into its bytes. Whatever this costs,
the gateway cannot cost less without another server or HTTP client, so ``bench/gateway_latency.py`` runs it
next to the gateway and prints both (issue 21).
"""

from __future__ import annotations

import sys
from pathlib import Path

import aiohttp
import uvicorn
from yarl import URL

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from jingpai.plugin.http_protocol import Utf8TargetHttpToolsProtocol  # noqa: E402

MEMBER = b',"jingpai":{"mode":"off","reranked":false,"reason":"disabled"}}'


def relay_app(engine_url: str):
    """The bare relay as an ASGI app (its session is made on the server's event loop, at the first request)."""
    sessions: list[aiohttp.ClientSession] = []

    async def app(scope, receive, send) -> None:  # noqa: ANN001 — ASGI
        if scope["type"] == "lifespan":
            while (message := await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            for session in sessions:
                await session.close()
            await send({"type": "lifespan.shutdown.complete"})
            return
        body, more = b"", True
        while more:
            message = await receive()
            body, more = body + message.get("body", b""), message.get("more_body", False)
        if not sessions:
            sessions.append(aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=256), cookie_jar=aiohttp.DummyCookieJar(),
                skip_auto_headers=("User-Agent", "Accept", "Accept-Encoding", "Content-Type"), auto_decompress=False))
        url = URL(engine_url + scope["raw_path"].decode("latin-1"), encoded=True)
        async with sessions[0].post(url, headers=[("content-type", "application/json")], data=body) as resp:
            status, content = resp.status, await resp.read()
        if status == 200:
            content = content.rstrip()[:-1] + MEMBER
        await send({"type": "http.response.start", "status": status, "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": content})

    return app


if __name__ == "__main__":
    engine, port = sys.argv[1], int(sys.argv[2])
    uvicorn.run(relay_app(engine), host="127.0.0.1", port=port, log_level="warning", access_log=False,
                http=Utf8TargetHttpToolsProtocol)
