"""The viewer page: `collect_run`'s record, the viewer's script and style, and Chart.js (vendored under
agentprm/assets/view/ with its MIT licence, which the page carries too) in one HTML file that works from `file://` —
no server, no network. `agentprm view --serve` only adds a local HTTP server for browsers that limit `file://`."""
from __future__ import annotations

import http.server
import json
import math
import re
import urllib.parse
from pathlib import Path

from agentprm import __version__
from agentprm.errors import UserError
from agentprm.io import write_text
from agentprm.view.collect import collect_run

ASSETS = Path(__file__).resolve().parents[1] / "assets" / "view"
GENERATOR = f"agentprm {__version__}"   # also how `outputs.written_by_agentprm` knows a page it may replace


def finite(value):
    """`value` with every NaN or infinite float made null: JSON has no NaN, and a page whose data holds one does not
    parse (a blank page)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


def embedded_json(data: dict) -> str:
    """JSON that cannot end its <script> element early: "</" and "<!--" only occur inside JSON strings, where
    "<\\/" and "<\\u0021--" read back the same. Strict JSON: non-finite numbers are null."""
    text = json.dumps(finite(data), separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return text.replace("</", "<\\/").replace("<!--", "<\\u0021--")


def render(data: dict) -> str:
    """The page's HTML. The template's {{name}} slots are filled in one pass, so nothing inserted is read again."""
    parts = {"generator": GENERATOR, "title": f"agentprm run {data['run']['dir']}",
             "style": (ASSETS / "viewer.css").read_text(), "viewer": (ASSETS / "viewer.js").read_text(),
             "chartjs": (ASSETS / "chart.umd.min.js").read_text(),
             "chartjs_license": (ASSETS / "chart.js-LICENSE.md").read_text().replace("--", "- -"),
             "data": embedded_json(data)}
    return re.sub(r"\{\{(\w+)\}\}", lambda m: parts[m.group(1)], (ASSETS / "viewer.html").read_text())


def write_page(data: dict, out: str | Path) -> Path:
    """Write the page atomically; returns its path."""
    write_text(Path(out), render(data))
    return Path(out)


def view_run(run_dir: str | Path, out: str | Path | None = None) -> Path:
    """Write the viewer page of a finished run (default RUN_DIR/view.html); returns its path."""
    return write_page(collect_run(run_dir), Path(out) if out else Path(run_dir) / "view.html")


class PageServer(http.server.ThreadingHTTPServer):
    """Serves one page, on loopback: GET / or /<page name> answers the page's bytes, read when asked (a rewritten page
    is served new); every other path is 404 — nothing else of the page's folder, and no link out of it."""

    def __init__(self, page: Path, port: int = 0):
        self.page = Path(page)
        try:
            super().__init__(("127.0.0.1", port), _PageHandler)
        except OSError as e:
            raise UserError(f"--port {port}: cannot listen on 127.0.0.1:{port} ({e.strerror})") from None


class _PageHandler(http.server.BaseHTTPRequestHandler):
    server: PageServer

    def do_GET(self) -> None:   # noqa: N802 (http.server's name)
        path = self.path.split("?", 1)[0]
        if path not in ("/", f"/{urllib.parse.quote(self.server.page.name)}"):
            return self._send(404, b"not found: this server serves the viewer page only\n", "text/plain")
        self._send(200, self.server.page.read_bytes(), "text/html; charset=utf-8")

    def _send(self, code: int, body: bytes, kind: str) -> None:
        self.send_response(code)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args) -> None:
        pass


def serve(page: Path, port: int = 8000) -> None:
    """Serve the page on 127.0.0.1 until Ctrl-C."""
    with PageServer(page, port) as server:
        print(f"serving http://127.0.0.1:{server.server_address[1]}/{page.name}  (Ctrl-C stops it)", flush=True)
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass
