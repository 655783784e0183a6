"""``python -m agn.provider --name NAME [--port N]``: run one fake inference provider."""

from __future__ import annotations

import signal
import sys
import threading
from pathlib import Path

from agn.inputfile import read_regular
from agn.provider.server import FakeProvider, serve_async
from agn.provider.settings import parse_settings


def read_api_keys(path: str) -> tuple[str, ...]:
    """The keys of an ``--api-key-file``: its non-empty lines, as llama.cpp's server reads one."""
    try:
        text = read_regular(Path(path), limit=1 << 20).decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SystemExit(f"--api-key-file {path}: cannot read it: {exc}") from None
    keys = tuple(line.strip() for line in text.splitlines() if line.strip())
    if not keys:
        raise SystemExit(f"--api-key-file {path}: holds no key")
    return keys


def main(argv: list[str] | None = None) -> int:
    args = parse_settings(argv, description=__doc__)

    state = FakeProvider(
        name=args.name,
        healthy=not args.unhealthy,
        metrics=not args.no_metrics,
        metrics_format=args.metrics_format,
        api_keys=read_api_keys(args.api_key_file) if args.api_key_file else (),
    )
    server = serve_async(state, port=args.port, host=args.host)
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
