"""`nightly serve`: the local artefact folders over HTTP, so the UI's links to logs, JUnit files
and summaries open in a browser (browsers do not follow file:// links from a web page)."""

from __future__ import annotations

import functools
import html
import http.server
import io
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

    def list_directory(self, path: str | os.PathLike[str]) -> Any:
        """The root lists each pipeline's results site above its folders; elsewhere a folder
        listing as usual."""
        if Path(path).resolve() != Path(self.directory).resolve():
            return super().list_directory(path)
        page = root_index(Path(self.directory)).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(page)))
        self.end_headers()
        return io.BytesIO(page)

    def log_message(self, format: str, *args: Any) -> None:
        sys.stderr.write(f"nightly serve: {self.address_string()} {format % args}\n")


def root_index(root: Path) -> str:
    """The artefact root's page: the pipelines' results sites, then every pipeline's folder."""
    folders = sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    sites = [name for name in folders if (root / name / "site" / "index.html").is_file()]

    def items(names: list[str], suffix: str) -> str:
        return "".join(
            f'<li><a href="{html.escape(name)}/{suffix}">{html.escape(name)}</a></li>' for name in names
        )

    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        "<title>Nightly artefacts</title></head><body><main><h1>Nightly artefacts</h1>"
        "<h2>Results sites</h2>"
        + (f"<ul>{items(sites, 'site/index.html')}</ul>" if sites else "<p>No results site built yet.</p>")
        + "<h2>Artefact folders</h2>"
        + (f"<ul>{items(folders, '')}</ul>" if folders else "<p>No artefacts yet.</p>")
        + "</main></body></html>"
    )


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
