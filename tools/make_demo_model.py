#!/usr/bin/env python3
"""Regenerate rknnlite/data/demo.rknn, the model `rknnlite demo` runs.

    python tools/make_demo_model.py [--check]

--check exits 1 if the shipped file differs from what the generator makes.
"""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rknnlite.demo import DEMO_MODEL_PATH, build_demo_model  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare instead of writing")
    args = parser.parse_args()
    data = build_demo_model()
    if args.check:
        same = DEMO_MODEL_PATH.is_file() and DEMO_MODEL_PATH.read_bytes() == data
        print(f"{DEMO_MODEL_PATH}: {'up to date' if same else 'STALE'}")
        return 0 if same else 1
    DEMO_MODEL_PATH.parent.mkdir(parents=True, exist_ok=True)
    DEMO_MODEL_PATH.write_bytes(data)
    print(f"wrote {DEMO_MODEL_PATH} ({len(data)} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
