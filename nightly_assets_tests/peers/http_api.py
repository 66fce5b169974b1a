"""The HTTP plumbing the fake APIs share (TPU, GitHub, ECR, Kubernetes): a loopback
`ThreadingHTTPServer` in a daemon thread that hands every request to one `respond` function and sends
what it returns (a body, or `chunks` streamed with chunked transfer encoding, as a followed log)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlsplit

LOOPBACK = "127.0.0.1"
JSON = "application/json; charset=utf-8"


@dataclass(frozen=True)
class Request:
    method: str
    path: str  # percent-decoded, without the query
    query: str  # the raw query string
    headers: Message
    body: bytes


@dataclass(frozen=True)
class Response:
    status: int
    body: bytes = b""
    headers: Mapping[str, str] = field(default_factory=dict)
    content_type: str = JSON
    chunks: Iterable[bytes] | None = None  # streamed instead of `body`, each chunk as it comes


class FakeHttpServer:
    """Serves `respond` on a free loopback port until `stop()`."""

    def __init__(self, respond: Callable[[Request], Response], name: str) -> None:
        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _serve(self) -> None:
                split = urlsplit(self.path)
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                answer = respond(Request(self.command, unquote(split.path), split.query, self.headers, raw))
                self.send_response(answer.status)
                for key, value in answer.headers.items():
                    self.send_header(key, value)
                if answer.chunks is not None:
                    self._stream(answer)
                    return
                if answer.status != 304:  # a 304 has no body, not even an empty one
                    self.send_header("Content-Type", answer.content_type)
                    self.send_header("Content-Length", str(len(answer.body)))
                self.end_headers()
                if answer.status != 304:
                    self.wfile.write(answer.body)

            def _stream(self, answer: Response) -> None:
                self.send_header("Content-Type", answer.content_type)
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                assert answer.chunks is not None
                try:
                    for chunk in answer.chunks:
                        if chunk:
                            self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                            self.wfile.flush()
                    self.wfile.write(b"0\r\n\r\n")
                except (BrokenPipeError, ConnectionResetError):
                    self.close_connection = True  # the client stopped reading (it was interrupted)

            do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _serve

            def log_message(self, *_: object) -> None:
                pass

        self._server = ThreadingHTTPServer((LOOPBACK, 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True, name=name).start()

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self._server.server_address[1]}"

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
