"""``python -m lakelock.testing``: serve the embedded S3 endpoint until interrupted.

Prints one line ``lakelock-endpoint-ready <url>`` once listening (``S3Endpoint(mode="process")``
waits for it). ``lakelock serve`` is the friendlier front door to the same server.
"""

from __future__ import annotations

import argparse
import signal
import sys
from types import FrameType

from lakelock.testing._endpoint import _READY, make_server
from lakelock.testing._faults import parse_fault_spec


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lakelock.testing")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--principal", action="append", default=[], metavar="KEY=ARN")
    parser.add_argument("--credential", action="append", default=None, metavar="KEY=SECRET")
    parser.add_argument("--fault", action="append", default=[], metavar="SPEC")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    principals = dict(p.split("=", 1) for p in args.principal)
    credentials = None
    if args.credential is not None:  # signatures checked against these
        credentials = dict(c.split("=", 1) for c in args.credential)
    server, gateway = make_server(
        args.host, args.port, principals=principals, credentials=credentials
    )
    gateway.faults.reseed(args.seed)
    for spec in args.fault:
        gateway.faults.add(parse_fault_spec(spec))

    def stop(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    print(f"{_READY}http://{args.host}:{server.server_port}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
