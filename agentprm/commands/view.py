"""`agentprm view RUN_DIR`: one self-contained HTML page of a finished run — the results with their paired CIs, curves
by iteration, and every saved eval episode turn by turn with the candidates its search weighed and their scores.
Open it from disk (file://); nothing is fetched. The loop writes the same page as RUN_DIR/view.html when it ends."""
from __future__ import annotations

from pathlib import Path

from agentprm.outputs import check_output_file, declare


def register(sub) -> None:
    p = sub.add_parser("view", help="write a run's viewer page: results, curves, episodes (one HTML file)",
                       description=__doc__)
    p.add_argument("run_dir", metavar="RUN_DIR", help="a run folder (agentprm loop / quickstart)")
    p.add_argument("--out", metavar="FILE", help="where to write the page (default RUN_DIR/view.html)")
    p.add_argument("--serve", action="store_true", help="then serve it on 127.0.0.1 until Ctrl-C")
    p.add_argument("--port", type=int, default=8000, help="port for --serve (default 8000; 0 = a free one)")
    p.add_argument("--overwrite", action="store_true", help="replace an --out file agentprm did not write")
    declare(p, {"out": "file:page"})   # the page may go inside the run folder it shows (RUN_DIR/view.html is the default)
    p.set_defaults(func=run)


def run(args) -> int:
    from agentprm.view.page import serve, view_run

    out = Path(args.out) if args.out else Path(args.run_dir) / "view.html"
    if not args.out:   # the declared --out was checked before any work; the default is checked here
        check_output_file(out, "", args.overwrite, "page")
    page = view_run(args.run_dir, out)
    print(f"{page}: open it in a browser (file://{page.resolve()})", flush=True)
    if args.serve:
        serve(page, args.port)
    return 0
