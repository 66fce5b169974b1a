"""`nightly serve`: the local artefact folders over HTTP, so the UI's links to logs, JUnit files
and summaries open in a browser (browsers do not follow file:// links from a web page)."""

from __future__ import annotations

import functools
import http.server
import os
import sys
from pathlib import Path
from typing import Any

# Shown in the browser, not downloaded.
TEXT_TYPES = {
    ".log": "text/plain; charset=utf-8",
    ".txt": "text/plain; charset=utf-8",
    ".md": "text/plain; charset=utf-8",
    ".xml": "text/xml; charset=utf-8",
    ".json": "application/json",
    ".csv": "text/plain; charset=utf-8",
    ".patch": "text/plain; charset=utf-8",
    ".py": "text/plain; charset=utf-8",
}


class ArtefactHandler(http.server.SimpleHTTPRequestHandler):
    """Read-only, and never outside the root: a checkout's symlink to /etc is not followed."""

    extensions_map = {**http.server.SimpleHTTPRequestHandler.extensions_map, **TEXT_TYPES}

    def send_head(self) -> Any:
        root = Path(self.directory).resolve()
        resolved = Path(self.translate_path(self.path)).resolve()
        if resolved != root and not resolved.is_relative_to(root):
            self.send_error(404, "outside the artefact folder")
            return None
        return super().send_head()

    def log_message(self, format: str, *args: Any) -> None:
        sys.stderr.write(f"nightly serve: {self.address_string()} {format % args}\n")


def make_server(root: Path, host: str, port: int) -> http.server.ThreadingHTTPServer:
    root.mkdir(parents=True, exist_ok=True)
    handler = functools.partial(ArtefactHandler, directory=os.fspath(root))
    return http.server.ThreadingHTTPServer((host, port), handler)


def serve_artefacts(root: Path, host: str, port: int) -> int:
    try:
        server = make_server(root, host, port)
    except OSError as exc:
        print(f"nightly serve: cannot listen on {host}:{port}: {exc.strerror}", file=sys.stderr)
        return 2
    print(f"nightly serve: {root} on http://{host}:{server.server_port}/ (Ctrl-C to stop)", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0
