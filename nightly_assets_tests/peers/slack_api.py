"""A fake of Slack's Web API `chat.postMessage`, as slack-sdk (under dagster-slack) calls it."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from urllib.parse import parse_qs

import pytest

from nightly_assets_tests.peers.http_api import FakeHttpServer, Request, Response


@dataclass
class FakeSlack:
    token: str
    posts: list[dict[str, str]] = field(default_factory=list)
    down: bool = False  # answer 503, as Slack does in an outage
    # cleared: requests hang, unanswered, until it is set again (a Slack or DNS outage that never
    # answers); a request held that way then fails and posts nothing
    answering: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self.answering.set()

    def respond(self, request: Request) -> Response:
        if not self.answering.is_set():
            self.answering.wait(timeout=120)
            return Response(503, b"upstream timed out", content_type="text/plain")
        if self.down:
            return Response(503, b"upstream unavailable", content_type="text/plain")
        if request.method != "POST" or request.path != "/api/chat.postMessage":
            return Response(404, json.dumps({"ok": False, "error": "unknown_method"}).encode())
        if request.headers.get("Authorization") != f"Bearer {self.token}":
            return Response(200, json.dumps({"ok": False, "error": "invalid_auth"}).encode())
        if "json" in (request.headers.get("Content-Type") or ""):
            body = json.loads(request.body or b"{}")
        else:
            body = {k: v[0] for k, v in parse_qs(request.body.decode()).items()}
        if not body.get("channel") or not body.get("text"):
            return Response(200, json.dumps({"ok": False, "error": "no_text"}).encode())
        self.posts.append({"channel": str(body["channel"]), "text": str(body["text"])})
        return Response(200, json.dumps({"ok": True, "channel": body["channel"], "ts": "1.0"}).encode())


@pytest.fixture
def slack_api() -> Iterator[tuple[FakeSlack, str]]:
    """The fake and its Web API base URL (`.../api/`)."""
    fake = FakeSlack(token="xoxb-nightly-test")
    server = FakeHttpServer(fake.respond, "fake-slack")
    try:
        yield fake, f"{server.url}/api/"
    finally:
        fake.answering.set()  # requests still held end now
        server.stop()
