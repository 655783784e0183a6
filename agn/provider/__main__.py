"""``python -m agn.provider --name NAME [--port N]``: run one fake inference provider."""

from __future__ import annotations

import argparse
import signal
import sys
import threading

from agn.provider.server import ProviderState, serve


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m agn.provider", description=__doc__)
    parser.add_argument("--name", required=True, help="provider name, echoed in every completion")
    parser.add_argument("--port", type=int, default=0, help="port (0: pick a free one)")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (in a pod: 0.0.0.0)")
    parser.add_argument("--unhealthy", action="store_true", help="start with /healthz failing")
    parser.add_argument("--no-metrics", action="store_true", help="start with /metrics disabled")
    args = parser.parse_args(argv)

    state = ProviderState(name=args.name, healthy=not args.unhealthy, metrics=not args.no_metrics)
    server = serve(state, port=args.port, host=args.host)
    stop = threading.Event()

    def on_signal(signum, frame):  # only sets a flag; shutdown happens below
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    thread = threading.Thread(target=server.serve_forever, name="http", daemon=True)
    thread.start()
    print(f"agn fake provider {args.name} listening on http://{args.host}:{server.server_address[1]}", flush=True)
    stop.wait()
    server.shutdown()
    server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
