"""A fake of ECR's API, enough for boto3's GetAuthorizationToken: a token that is the base64 of
``user:password`` of a real registry, as ECR's is for the account's registry.

It checks what the real API would see first: a SigV4 ``Authorization`` header with an access key,
and the ``X-Amz-Target`` of the operation. ``deny`` makes it answer AccessDeniedException.
"""

from __future__ import annotations

import base64
import json
import re
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TARGET = "AmazonEC2ContainerRegistry_V20150921.GetAuthorizationToken"
_CREDENTIAL = re.compile(r"Credential=([^/]+)/")


@dataclass
class FakeEcrApi:
    username: str
    password: str
    proxy_endpoint: str
    deny: bool = False
    calls: list[str] = field(default_factory=list)  # the access key id of each call
    _server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> FakeEcrApi:
        api = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                match = _CREDENTIAL.search(self.headers.get("Authorization", ""))
                if self.headers.get("X-Amz-Target") != TARGET or match is None:
                    return self._answer(400, {"__type": "InvalidSignatureException", "message": "unsigned"})
                api.calls.append(match.group(1))
                if api.deny:
                    message = f"User {match.group(1)} is not authorized to perform ecr:GetAuthorizationToken"
                    return self._answer(400, {"__type": "AccessDeniedException", "message": message})
                token = base64.b64encode(f"{api.username}:{api.password}".encode()).decode()
                data = {"authorizationToken": token, "expiresAt": time.time() + 12 * 3600}
                data["proxyEndpoint"] = api.proxy_endpoint
                return self._answer(200, {"authorizationData": [data]})

            def _answer(self, status: int, body: dict) -> None:
                payload = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/x-amz-json-1.1")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *_: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
