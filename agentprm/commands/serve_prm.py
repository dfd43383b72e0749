"""`agentprm serve-prm`: a PRM folder as an HTTP reward endpoint for other trainers (prm/serve.py has the protocol):
GET /health, POST /score with episodes, answered with Q(s_t, a_t) per turn. Runs until Ctrl-C."""
from __future__ import annotations

import os

from agentprm.commands.common import add_device_flags
from agentprm.errors import require
from agentprm.io import read_text
from agentprm.outputs import declare


def register(sub) -> None:
    p = sub.add_parser("serve-prm", help="serve a PRM's per-turn scores over HTTP until interrupted",
                       description=__doc__)
    p.add_argument("--prm", required=True, metavar="DIR", help="a PRM folder (train-prm), or PRIME's implicit PRM")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8100, help="port (default 8100; 0 = a free one)")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds a client may take to send its request "
                                                              "(default 60)")
    p.add_argument("--token-file", metavar="FILE", help="a file holding the bearer token that POST /score requires "
                   "(header 'Authorization: Bearer <token>'); $AGENTPRM_PRM_TOKEN does the same. Default: no token, "
                   "for a server on loopback")
    add_device_flags(p)
    declare(p, inputs=("prm", "token_file"))
    p.set_defaults(func=run)


def run(args) -> int:
    from agentprm.prm.loading import load_prm
    from agentprm.prm.serve import PRMServer

    token = os.environ.get("AGENTPRM_PRM_TOKEN", "")
    if args.token_file:
        lines = read_text(args.token_file, max_bytes=4096).splitlines()
        token = lines[0].strip() if lines else ""
        require(bool(token), f"{args.token_file}: the token file is empty")
    critic = load_prm(args.prm)
    server = PRMServer(critic, str(args.prm), args.host, args.port, args.timeout, token)
    print(f"serving {args.prm} at {server.url}  (GET /health, POST /score); Ctrl-C stops it", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0
