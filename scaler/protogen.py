"""Regenerate the gRPC stubs for protos/externalscaler.proto.

The one script that produces ``scaler/_proto/externalscaler_pb2*.py``::

    python -m scaler.protogen          # write the stubs
    python -m scaler.protogen --check  # exit 1 when the committed stubs are stale

grpc_tools emits ``import externalscaler_pb2 as ...`` at top level; the stubs
live inside the package, so that import is rewritten to a relative one.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROTO = ROOT / "protos" / "externalscaler.proto"
OUT_DIR = Path(__file__).resolve().parent / "_proto"
STUBS = ("externalscaler_pb2.py", "externalscaler_pb2.pyi", "externalscaler_pb2_grpc.py")


def generate(out_dir: Path) -> dict[str, str]:
    """Run protoc into ``out_dir`` and return {file name: fixed text}."""
    from grpc_tools import protoc  # imported here: only this script needs it

    args = [
        "grpc_tools.protoc",
        f"-I{PROTO.parent}",
        f"--python_out={out_dir}",
        f"--pyi_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        str(PROTO),
    ]
    if protoc.main(args) != 0:
        raise RuntimeError(f"protoc failed on {PROTO}")
    texts = {}
    for name in STUBS:
        text = (out_dir / name).read_text()
        text = re.sub(r"^import externalscaler_pb2 as", "from . import externalscaler_pb2 as", text, flags=re.M)
        texts[name] = text
    return texts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail when the committed stubs differ")
    ns = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        fresh = generate(Path(tmp))
    stale = [n for n, t in fresh.items() if not (OUT_DIR / n).exists() or (OUT_DIR / n).read_text() != t]
    if ns.check:
        if stale:
            print(f"stale stubs: {', '.join(stale)}; run: python -m scaler.protogen", file=sys.stderr)
            return 1
        print("stubs are up to date")
        return 0
    OUT_DIR.mkdir(exist_ok=True)
    for name, text in fresh.items():
        (OUT_DIR / name).write_text(text)
    print(f"wrote {', '.join(fresh)} to {OUT_DIR.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
