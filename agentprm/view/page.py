"""The viewer page: `collect_run`'s record, the viewer's script and style, and Chart.js (vendored under
agentprm/assets/view/ with its MIT licence, which the page carries too) in one HTML file that works from `file://` —
no server, no network. `agentprm view --serve` only adds a local HTTP server for browsers that limit `file://`."""
from __future__ import annotations

import functools
import http.server
import json
import re
from pathlib import Path

from agentprm import __version__
from agentprm.io import write_text
from agentprm.view.collect import collect_run

ASSETS = Path(__file__).resolve().parents[1] / "assets" / "view"
GENERATOR = f"agentprm {__version__}"   # also how `outputs.written_by_agentprm` knows a page it may replace


def embedded_json(data: dict) -> str:
    """JSON that cannot end its <script> element early: "</" and "<!--" only occur inside JSON strings, where
    "<\\/" and "<\\u0021--" read back the same."""
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False).replace("</", "<\\/").replace("<!--", "<\\u0021--")


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


def serve(page: Path, port: int = 8000) -> None:
    """Serve the page's folder on 127.0.0.1 until Ctrl-C."""
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(page.parent))
    with http.server.ThreadingHTTPServer(("127.0.0.1", port), handler) as server:
        print(f"serving http://127.0.0.1:{server.server_address[1]}/{page.name}  (Ctrl-C stops it)", flush=True)
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass
