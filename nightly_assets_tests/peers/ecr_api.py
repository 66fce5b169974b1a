"""A fake of ECR's API, enough for boto3's GetAuthorizationToken: a token that is the base64 of
``user:password`` of a real registry, as ECR's is for the account's registry.

It checks what the real API would see first: a SigV4 ``Authorization`` header with an access key,
and the ``X-Amz-Target`` of the operation. ``deny`` makes it answer AccessDeniedException.
"""

from __future__ import annotations

import base64
import json
import re
import time
from dataclasses import dataclass, field

from nightly_assets_tests.peers.http_api import FakeHttpServer, Request, Response

TARGET = "AmazonEC2ContainerRegistry_V20150921.GetAuthorizationToken"
_CREDENTIAL = re.compile(r"Credential=([^/]+)/")


@dataclass
class FakeEcrApi:
    username: str
    password: str
    proxy_endpoint: str
    deny: bool = False
    calls: list[str] = field(default_factory=list)  # the access key id of each call
    _server: FakeHttpServer | None = None

    @property
    def url(self) -> str:
        assert self._server is not None
        return self._server.url

    def start(self) -> FakeEcrApi:
        self._server = FakeHttpServer(self._respond, "fake-ecr-api")
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()

    def _respond(self, request: Request) -> Response:
        match = _CREDENTIAL.search(request.headers.get("Authorization", ""))
        if request.method != "POST" or request.headers.get("X-Amz-Target") != TARGET or match is None:
            return _answer(400, {"__type": "InvalidSignatureException", "message": "unsigned"})
        self.calls.append(match.group(1))
        if self.deny:
            message = f"User {match.group(1)} is not authorized to perform ecr:GetAuthorizationToken"
            return _answer(400, {"__type": "AccessDeniedException", "message": message})
        token = base64.b64encode(f"{self.username}:{self.password}".encode()).decode()
        data = {"authorizationToken": token, "expiresAt": time.time() + 12 * 3600}
        data["proxyEndpoint"] = self.proxy_endpoint
        return _answer(200, {"authorizationData": [data]})


def _answer(status: int, body: dict) -> Response:
    return Response(status, json.dumps(body).encode(), content_type="application/x-amz-json-1.1")
