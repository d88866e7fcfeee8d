"""Coverage-guided fuzzing of the model readers with atheris (libFuzzer for Python).

Each input is one model file, run through ``tests/fuzzing.py``'s :func:`exercise` (load on
the software backend, one run on zero inputs).  An input starting with the portable magic
has its checksums recomputed first (``reseal_portable``), so that mutations get past them
to the metadata, graph and weights readers; an input starting with ``b"E"`` is the rest
encrypted with a fixed key and loaded with it.  A broken rule (an exception other than an
``RKNNError``) is a crash.

By default every distinct crash (exception type + innermost frame) is written once to
``--artifacts`` and the run goes on; ``--stop`` makes the first one end the run, as
libFuzzer does.  Hangs and memory blow-ups are libFuzzer's ``-timeout`` and
``-rss_limit_mb``.  See tools/fuzz/README.md.

    python tools/fuzz/fuzz_models.py --seed-corpus CORPUS_DIR     # writes the seeds, exits
    python tools/fuzz/fuzz_models.py CORPUS_DIR -max_total_time=1800 -timeout=30 -rss_limit_mb=4096
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO))

#: The key of ``E``-prefixed inputs.
KEY = bytes(range(32))


def write_seeds(corpus: Path) -> int:
    """Fill ``corpus`` with the vendor corpus and fixture files (the large benchmark model
    left out), the small portable models of ``tests/conftest.py`` and encrypted copies of
    them; returns how many files it wrote."""
    from conftest import _context_models

    corpus.mkdir(parents=True, exist_ok=True)
    seeds = {}
    for folder in (REPO / "tests" / "data" / "vendor", REPO / "tests" / "data" / "rknn-toolkit2" / "rknn"):
        for path in sorted(folder.glob("*.rknn")):
            if not path.name.startswith("bench"):
                seeds[path.name] = path.read_bytes()
    for name, data in _context_models().items():
        seeds[f"portable_{name}.rknn"] = data
        seeds[f"encrypted_{name}.rknn"] = b"E" + data
    for name, data in seeds.items():
        (corpus / name).write_bytes(data)
    return len(seeds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed-corpus", type=Path, help="write the seed files into this folder and exit")
    parser.add_argument("--artifacts", type=Path, default=Path("fuzz-crashes"),
                        help="where each distinct crash's input is written (default: ./fuzz-crashes)")
    parser.add_argument("--stop", action="store_true", help="end the run at the first crash")
    args, libfuzzer_args = parser.parse_known_args()
    if args.seed_corpus:
        print(f"{write_seeds(args.seed_corpus)} seed files in {args.seed_corpus}")
        return

    import atheris

    with atheris.instrument_imports(include=["rknnlite"]):
        import rknnlite  # noqa: F401
        import rknnlite.backends.software  # noqa: F401
        import rknnlite.model.rknn_graph  # noqa: F401
    from fuzzing import exercise, reseal_portable

    from rknnlite.model.container import MAGIC
    from rknnlite.model.envelope import encrypt

    seen = set()

    def one_input(raw: bytes) -> None:
        data, key = raw, None
        if raw[:1] == b"E":
            key, data = KEY, encrypt(reseal_portable(raw[1:]), KEY)
        elif data[:len(MAGIC)] == MAGIC:
            data = reseal_portable(data)
        try:
            exercise(data, key)
        except Exception as e:
            if args.stop:
                raise
            frame = traceback.extract_tb(e.__traceback__)[-1]
            signature = f"{type(e).__name__} at {frame.filename}:{frame.lineno}"
            if signature not in seen:
                seen.add(signature)
                args.artifacts.mkdir(parents=True, exist_ok=True)
                name = "crash-" + hashlib.sha1(signature.encode()).hexdigest()[:12]
                (args.artifacts / name).write_bytes(raw)
                sys.stderr.write(f"NEW CRASH {name}: {signature}: {str(e)[:200]}\n")

    atheris.Setup([sys.argv[0]] + libfuzzer_args, one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
