#!/usr/bin/env python3
"""Serve a policy comparison's models once, on its fixed ports, until stopped (SIGTERM or Ctrl-C).

  serve_models.py COMPARISON.yaml [--which large small] [--log-dir DIR] [--ready FILE]

With `sharedServers` in the comparison (cudanalyst.comparison.SharedServers), every recording of the comparison
names `http://127.0.0.1:PORT/v1` as its model's endpoint; this script is what answers there
(scripts/device/policy.sh starts it before the recordings and stops it after them). The models start one after
the other (two vLLM servers initialising at once on one H200 failed, 2026-12-02), each as `cudanalyst record` would
serve it (the runner's start_local_server: its compile cache, its server flags); a line per model says when it was
healthy and where its start went. FILE lists the URL of each model that answers, a line each, once every start is
over; a model that failed to start is said, and the others go on serving. Exit 2 on bad input, 1 once no server is
left (none started, or all died), 0 when stopped.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import time
from pathlib import Path

EXIT_INVALID = 2


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("comparison")
    parser.add_argument("--which", nargs="+", choices=("large", "small"), default=["large", "small"])
    parser.add_argument("--log-dir", default=None, help="the servers' logs (default: a temporary folder each)")
    parser.add_argument("--ready", default=None, help="the URLs that answer, once every start is over")
    args = parser.parse_args(argv)

    from cudanalyst.comparison import ComparisonSpecError, load_spec, served_name

    try:
        spec = load_spec(args.comparison)
    except ComparisonSpecError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INVALID
    if spec.shared_servers is None:
        print(f"error: {args.comparison}: sharedServers: absent, so each recording serves its own model",
              file=sys.stderr)
        return EXIT_INVALID

    from cudanalyst.runner.llm.serving import ServingError, start_local_server
    from cudanalyst.runner.weights import WeightsError, resolve_model_path

    def stop(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    if args.log_dir:
        Path(args.log_dir).mkdir(parents=True, exist_ok=True)
    paths = {}
    for which in args.which:  # every model's folder before any server starts
        try:
            paths[which] = resolve_model_path(str(getattr(spec, which).model))
        except WeightsError as exc:
            print(f"error: {args.comparison}: {which}.model: {exc}", file=sys.stderr)
            return EXIT_INVALID
    with contextlib.ExitStack() as stack:
        try:
            servers = []
            for which in args.which:
                model, port, name = getattr(spec, which), getattr(spec.shared_servers, which), served_name(getattr(spec, which))
                print(f"{time.strftime('%H:%M:%S')}  starting {name} ({which}) on port {port}", flush=True)
                try:
                    server = stack.enter_context(start_local_server(
                        paths[which], model, served_name=name, port=port, log_dir=args.log_dir))
                except ServingError as exc:  # the others still serve their recordings
                    print(f"error: {name} ({which}) did not start: {exc}", file=sys.stderr, flush=True)
                    continue
                phases = server.start.describe() if server.start is not None else ""
                found = f"; compiled artefacts: {server.compile_cache.found}" if server.compile_cache else ""
                print(f"{time.strftime('%H:%M:%S')}  serving {name} at {server.endpoint.base_url}: healthy after "
                      f"{server.healthy_after_s:.1f} s{f' ({phases})' if phases else ''}{found}", flush=True)
                servers.append(server)
            if args.ready:
                # Once every start is over: a server's memory profiling counts what other processes allocate on
                # the GPU meanwhile (H200, 2026-12-04: the small model, started beside four recordings, saw 72 GiB
                # of "CUDA graph memory" and failed), so recordings wait for this file. Whole, never half-written.
                part = Path(f"{args.ready}.part")
                part.write_text("".join(f"{s.endpoint.base_url}\n" for s in servers))
                part.replace(args.ready)
            while servers:
                for server in list(servers):
                    if (code := server.process.poll()) is not None:
                        print(f"error: the server of {server.endpoint.model} exited with status {code}; log tail:\n"
                              f"{server.log_tail()}", file=sys.stderr, flush=True)
                        servers.remove(server)
                time.sleep(2)
            return 1
        except KeyboardInterrupt:
            print(f"{time.strftime('%H:%M:%S')}  stopping the servers", flush=True)
            return 0


if __name__ == "__main__":
    sys.exit(main())
