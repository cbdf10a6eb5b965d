"""`cudanalyst crd`: print the CustomResourceDefinition generated from the models, or write/check its copies."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from cudanalyst import crd


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("crd", help="print or write the generated CRD", description=__doc__)
    p.add_argument("--write", action="store_true",
                   help="write the CRDs of both kinds under manifests/ and charts/cudanalyst/templates/ (below --root)")
    p.add_argument("--check", action="store_true", help="exit 1 if the files under --root differ from the models")
    p.add_argument("--root", default=".", help="repository root (default: .)")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    root = Path(args.root)
    if args.check:
        stale = [str(rel) for rel, text in crd.generated_files()
                 if not (root / rel).is_file() or (root / rel).read_text() != text]
        if stale:
            print(f"out of date: {', '.join(stale)}; run `cudanalyst crd --write`", file=sys.stderr)
            return 1
        print("CRD files match the models")
        return 0
    if args.write:
        for path in crd.write_files(root):
            print(f"wrote {path}")
        return 0
    sys.stdout.write(crd.render_manifest())
    return 0
