"""``sparsegnn curate serve``: the local curation web page (``sparsegnn.curation.serve``).

Kept out of ``curate_cmd`` so the page's options live next to nothing else's.
"""

from __future__ import annotations

import argparse
import sys
import webbrowser

from sparsegnn.cli.common import float_range, int_range
from sparsegnn.cli.curate_cmd import memory_size


def register_serve(cmds: argparse._SubParsersAction) -> None:
    p = cmds.add_parser("serve", help="browse, query and export a store in a local web page")
    p.add_argument("--corpus", required=True, help="folder with documents/annotations.parquet")
    p.add_argument("--port", type=int_range(0, 65535), default=0,
                   help="port on 127.0.0.1 (default 0: any free port)")
    p.add_argument("--open", action="store_true", help="open the page in a web browser")
    p.add_argument("--timeout", type=float_range(0, lo_open=True), default=120.0,
                   help="seconds one query (or export) may run; default 120")
    p.add_argument("--memory-limit", type=memory_size, default=4 * 2**30, metavar="SIZE",
                   help="memory one query may use, e.g. 512MB or 8GB (default 4GB)")
    p.set_defaults(func=_serve)


def _serve(args: argparse.Namespace) -> int:
    from sparsegnn.curation.sandbox import Limits
    from sparsegnn.curation.serve import CurationServer

    server = CurationServer(args.corpus, args.port, Limits(args.timeout, args.memory_limit))
    with server:
        print(f"serving {args.corpus} at {server.url}\n"
              "(127.0.0.1 only; the token in the URL is required; Ctrl-C stops)", flush=True)
        if args.open:
            webbrowser.open(server.url)
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            print("stopped", file=sys.stderr)
    return 0
