"""The ``rknnlite`` command.

    rknnlite --version
    rknnlite demo
    rknnlite inspect FILE [--json] [key options]
    rknnlite encrypt IN OUT (--key-file F | --passphrase P | --key-env [VAR]) [--bind-device] [--rekey ...]
    rknnlite convert -i model_config.yml -o OUT -t TARGET [-e] [-a "x.jpg y.jpg"] [-v] [-d ID]
    rknnlite doctor [--json] [--library PATH] [--model FILE]
    rknnlite serve [--model-repository DIR] [--model NAME=FILE ...] [--host H] [--port P] [--token T | --token-file F]

User errors print one line (``rknnlite: error: ...``) and exit 1; usage errors exit 2.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import List, Optional

from ._version import __version__
from .errors import KeyInvalidError, RKNNError

__all__ = ["main", "build_parser"]


class CLIError(Exception):
    """A user error: printed as one line, exit status 1."""


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``rknnlite`` command."""
    parser = argparse.ArgumentParser(
        prog="rknnlite",
        description="Open-source runtime for Rockchip NPU .rknn models (runs off-board on a software NPU).",
    )
    parser.add_argument("--version", action="version", version=f"rknnlite {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    demo = sub.add_parser("demo", help="run the bundled demo model on the software backend")
    demo.add_argument("--runs", type=int, default=20, help="timed runs after the first (default 20)")
    demo.set_defaults(func=_cmd_demo)

    inspect = sub.add_parser(
        "inspect", help="describe a model file (any supported format)",
        description="Describe a model file: format, tensors, quantization, dynamic shapes; for a Rockchip "
                    ".rknn also its vendor op types and whether each (and the whole file) runs off-board on "
                    "the software backend.")
    inspect.add_argument("file", help="a .rknn file (portable, Rockchip, or encrypted)")
    inspect.add_argument("--json", action="store_true", help="print JSON instead of text")
    _add_key_options(inspect, required=False, help_suffix=" (to look inside an encrypted model)")
    inspect.set_defaults(func=_cmd_inspect)

    encrypt = sub.add_parser(
        "encrypt",
        help="encrypt a model with AES-256-GCM (or re-key an encrypted one)",
        description="Encrypt IN into OUT.  The model is decrypted in memory only when loaded.",
    )
    encrypt.add_argument("input", metavar="IN")
    encrypt.add_argument("output", metavar="OUT")
    _add_key_options(encrypt, required=True)
    encrypt.add_argument("--create-key", action="store_true",
                         help="with --key-file: write a new random key there first (the file must not exist)")
    encrypt.add_argument("--bind-device", action="store_true",
                         help="bind to this machine's identity (SoC serial or machine-id); fails elsewhere")
    encrypt.add_argument("--rekey", action="store_true",
                         help="IN is already encrypted: open it with the --old-* key and encrypt with the new one")
    encrypt.add_argument("--old-key-file", metavar="PATH", help="with --rekey: the current key file")
    encrypt.add_argument("--old-passphrase", metavar="TEXT", help="with --rekey: the current passphrase")
    encrypt.add_argument("--old-key-env", metavar="VAR", help="with --rekey: variable holding the current key")
    encrypt.add_argument("--chunk-size", type=int, default=1 << 20, help="bytes per authenticated chunk")
    encrypt.set_defaults(func=_cmd_encrypt)

    convert = sub.add_parser(
        "convert",
        help="convert the ONNX models of a yml config into .rknn files (as rknn_convert)",
        description="Convert every model of a yml config (RKNN-Toolkit2's rknn_convert layout) into OUT/<name>.rknn.",
    )
    convert.add_argument("-i", "--input", required=True, metavar="YML", help="the model configuration file")
    convert.add_argument("-o", "--output", required=True, metavar="OUT", help="output directory")
    convert.add_argument("-t", "--target-platform", required=True, metavar="TARGET",
                         help="rv1103, rv1103b, rv1106, rv1106b, rv1126b, rk2118, rk3562, rk3566, rk3568, rk3576 "
                              "or rk3588")
    convert.add_argument("-e", "--eval", action="store_true",
                         help="measure latency and memory of each model on the software backend")
    convert.add_argument("-a", "--accuracy", metavar="FILES",
                         help='"x.jpg y.jpg": cosine of each output against the float model on these inputs')
    convert.add_argument("-v", "--verbose", action="store_true", help="print the toolkit's detailed log")
    convert.add_argument("-d", "--device-id", metavar="ID",
                         help="board-connected evaluation (not available: evaluation runs on the software backend)")
    convert.set_defaults(func=_cmd_convert)

    doctor = sub.add_parser(
        "doctor",
        help="report the SoC, librknnrt, NPU driver and which backends can run here",
        description="Report the SoC, librknnrt (path and version), the NPU driver version and load, Python and "
                    "package versions, and for each backend whether it is available and why not.",
    )
    doctor.add_argument("--json", action="store_true", help="print JSON instead of text")
    doctor.add_argument("--library", metavar="PATH", help="librknnrt.so to check (default: the npu backend's search)")
    doctor.add_argument("--model", metavar="FILE", help="also open this model and report the runtime's SDK versions")
    doctor.set_defaults(func=_cmd_doctor)

    serve = sub.add_parser(
        "serve",
        help="serve models over the Open Inference Protocol v2 (KServe v2 / Triton HTTP clients)",
        description="Serve a model repository (and/or single model files) over HTTP with the Open Inference "
                    "Protocol v2. SIGTERM drains and exits 0; SIGHUP reloads the repository. Needs the daemon "
                    "extra (aiohttp, prometheus-client).",
    )
    from .daemon.command import add_arguments as _serve_arguments

    _serve_arguments(serve)
    serve.set_defaults(func=_cmd_serve)
    return parser


def _add_key_options(p: argparse.ArgumentParser, required: bool, help_suffix: str = "") -> None:
    group = p.add_mutually_exclusive_group(required=required)
    group.add_argument("--key-file", metavar="PATH", help="32-byte key file (raw, hex or base64)" + help_suffix)
    group.add_argument("--passphrase", metavar="TEXT",
                       help="derive the key with scrypt; '-' reads it from standard input" + help_suffix)
    group.add_argument("--key-env", metavar="VAR", nargs="?", const="RKNNLITE_MODEL_KEY",
                       help="read a hex/base64 key from VAR (default RKNNLITE_MODEL_KEY)" + help_suffix)


def _key_from(key_file: Optional[str], passphrase: Optional[str], key_env: Optional[str]):
    from .model.envelope import ModelKey

    if key_file:
        return ModelKey.from_file(key_file)
    if passphrase is not None:
        if passphrase == "-":
            passphrase = sys.stdin.readline().rstrip("\r\n")
        if not passphrase:
            raise CLIError("the passphrase is empty")
        return ModelKey.passphrase(passphrase)
    if key_env:
        if not os.environ.get(key_env):
            raise CLIError(f"environment variable {key_env} is not set")
        return ModelKey.from_env(key_env)
    return None


# -- commands -------------------------------------------------------------------------------


def _cmd_demo(args) -> int:
    from .demo import run_demo

    run_demo(runs=args.runs)
    return 0


def _cmd_inspect(args) -> int:
    from .model import envelope
    from .model.loader import encryption_summary, load_model
    from .model.source import open_source

    key = _key_from(args.key_file, args.passphrase, args.key_env)
    source = open_source(args.file)
    if envelope.is_encrypted(source.view) and key is None:
        info = envelope.envelope_info(source.view)
        summary = {"format": "rknnlite-encrypted", "size": len(source.view), "encryption": encryption_summary(info),
                   "note": "a key is needed to read the model inside (--key-file, --passphrase or --key-env)"}
    else:
        loaded = load_model(source, key=key)
        summary = loaded.summary()
        _add_vendor_ops(summary, loaded)
    summary["file"] = args.file
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        print(_format_summary(summary))
    return 0


def _add_vendor_ops(summary: dict, loaded) -> None:
    """A Rockchip file's vendor op types and whether the software backend runs each off-board
    (``vendor_ops``: ``[{op, count, off_board}]``), or why its graph cannot be read
    (``vendor_ops_error``); and whether the whole file runs off-board (``off_board``:
    ``{"runs": bool, "error": message or None, "notes": [...]}``, from lowering it; the notes say what
    may keep a file that runs from the simulator's outputs bit for bit)."""
    from .errors import ModelInvalidError
    from .model.loader import ROCKCHIP

    if loaded.format != ROCKCHIP or not summary.get("flatbuffer"):
        return
    from .model.rknn_graph import lower_rockchip, op_support

    try:
        summary["vendor_ops"] = [{"op": op, "count": n, "off_board": ok}
                                 for op, n, ok in op_support(loaded.payload, loaded.model)]
    except ModelInvalidError as e:
        summary["vendor_ops_error"] = e.message
    try:
        notes = list(lower_rockchip(loaded.payload, loaded.model).notes)
        summary["off_board"] = {"runs": True, "error": None, "notes": notes}
    except ModelInvalidError as e:
        summary["off_board"] = {"runs": False, "error": e.message, "notes": []}
    from .model.rknn_graph.validated import VALIDATED, toolkit_release

    rk = loaded.model
    platform = ((rk.target_platforms or [rk.target_platform or ""])[0] or "").lower()
    toolkit = toolkit_release(rk.toolkit_version or rk.compiler_version)
    checked = sorted(p for p, t in VALIDATED if p == platform and t == toolkit)
    summary["validated_for"] = (f"{platform} / RKNN-Toolkit2 {toolkit}: " +
                                (", ".join(sorted(VALIDATED[(platform, toolkit)])) if checked else
                                 "not validated (docs/vendor-offboard.md lists the validated combinations)"))


def _format_summary(s: dict) -> str:
    lines = [f"file:     {s['file']}", f"format:   {s['format']}" + (f" v{s['format_version']}" if s.get("format_version") else "")]
    enc = s.get("encryption")
    if enc:
        bound = "bound to one device" if enc["device_bound"] else "not device-bound"
        lines.append(f"encrypted: AES-256-GCM envelope v{enc['envelope_version']}, {enc['key_kind']} key, {bound}, "
                     f"payload {enc['payload_size']} bytes")
    for key, label in (("producer", "producer"), ("toolkit_full_version", "toolkit"), ("npu_target", "npu"),
                       ("framework", "source"), ("inference_type", "shapes"), ("target_platforms", "targets"),
                       ("float_dtype", "float"), ("quantization", "quant"), ("custom_string", "custom"),
                       ("batch_size", "batch"), ("size", "size"), ("note", "note"), ("graph_error", "graph")):
        value = s.get(key)
        if value in (None, "", []):
            continue
        if isinstance(value, list):
            value = ", ".join(map(str, value))
        lines.append(f"{label + ':':<9} {value}")
    for kind in ("inputs", "outputs"):
        for i, t in enumerate(s.get(kind, [])):
            quant = ""
            q = t.get("quant")
            if q:
                quant = f" {q['dtype']} scale={_short(q['scale'])} zp={_short(q['zero_point'])}"
            lines.append(f"{kind[:-1]:<6} {i}: {t['name']} {t['shape']} {t['dtype']} {t['layout']}{quant}")
    if s.get("dynamic_shapes"):
        lines.append("dynamic shapes:")
        lines.extend(f"  {i}: {shapes}" for i, shapes in enumerate(s["dynamic_shapes"]))
    if s.get("vendor_ops"):
        lines.append("vendor ops (supported: the software backend lowers this op type):")
        lines.extend(f"  {v['op']:<20} x{v['count']:<4} {'supported' if v['off_board'] else 'NOT supported'}"
                     for v in s["vendor_ops"])
    if s.get("vendor_ops_error"):
        lines.append(f"vendor ops: cannot be read off-board: {s['vendor_ops_error']}")
    if s.get("validated_for"):
        lines.append(f"validated off-board: {s['validated_for']}")
    off_board = s.get("off_board")
    if off_board:
        lines.append("off-board: runs on the software backend" if off_board["runs"]
                     else f"off-board: cannot run: {off_board['error']}")
        lines.extend(f"  note: {note}" for note in off_board.get("notes", ()))
    return "\n".join(lines)


def _short(values) -> str:
    return str(values[0]) if len(values) == 1 else f"[{len(values)} per-channel]"


def _cmd_encrypt(args) -> int:
    from .model import envelope
    from .model.source import open_source

    if args.create_key:
        if not args.key_file:
            raise CLIError("--create-key needs --key-file PATH")
        envelope.write_key_file(args.key_file, envelope.generate_key())
    new_key = _key_from(args.key_file, args.passphrase, args.key_env)
    source = open_source(args.input)
    encrypted = envelope.is_encrypted(source.view)
    if args.rekey:
        if not encrypted:
            raise CLIError(f"{args.input} is not encrypted; drop --rekey")
        old_key = _key_from(args.old_key_file, args.old_passphrase, args.old_key_env)
        if old_key is None:
            raise CLIError("--rekey needs the current key: --old-key-file, --old-passphrase or --old-key-env")
        data = envelope.rekey(source.view, old_key, new_key, bind_device=args.bind_device or None)
    else:
        if encrypted:
            raise CLIError(f"{args.input} is already encrypted; use --rekey to change its key")
        from .model.loader import detect_format

        detect_format(source.view)  # refuse files that are no model at all
        data = envelope.encrypt(source.view, new_key, bind_device=args.bind_device, chunk_size=args.chunk_size)
    _write_atomically(args.output, data)
    print(f"wrote {args.output} ({len(data)} bytes, {'device-bound' if args.bind_device else 'portable'})")
    return 0


def _cmd_convert(args) -> int:
    import logging

    from .toolkit.convert import ConvertError, convert

    handler = None
    if not args.verbose:
        # The command is the application here: it shows the toolkit's warnings and errors.
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(levelname).1s %(message)s"))
        handler.setLevel(logging.WARNING)
        logging.getLogger("rknnlite").addHandler(handler)
    if args.device_id is not None:
        print(f"W -d {args.device_id}: board-connected evaluation is not available; "
              "evaluating on the software backend", file=sys.stderr)
    files = args.accuracy.split() if args.accuracy else []
    try:
        results = convert(args.input, args.output, args.target_platform, accuracy_inputs=files,
                          evaluate=args.eval, verbose=args.verbose)
    except ConvertError as e:
        raise CLIError(str(e)) from None
    finally:
        if handler is not None:
            logging.getLogger("rknnlite").removeHandler(handler)
    for r in results:
        print(f"{r.name}: wrote {r.path}")
        for file, cosines in zip(files, r.cosine):
            print(f"  accuracy {file}: cosine " + ", ".join(f"output{k} {c:.6f}" for k, c in enumerate(cosines)))
        if r.latency_ms is not None:
            mem = ", ".join(f"{k} {v / 2**20:.2f} MiB" for k, v in r.memory.items())
            print(f"  eval: {r.latency_ms:.3f} ms per inference (software backend); memory: {mem}")
    return 0


def _cmd_serve(args) -> int:
    try:
        from .daemon.command import run
        from .daemon.server import Server  # noqa: F401  (fails early without the daemon extra)
    except ImportError as e:
        raise CLIError(f"serve needs the daemon extra: pip install \"rknnlite-runtime[daemon]\" ({e})") from None
    return run(args)


def _cmd_doctor(args) -> int:
    from .doctor import collect, format_report

    report = collect(library=args.library, model=args.model)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        sys.stdout.write(format_report(report))
    return 0


def _write_atomically(path: str, data: bytes) -> None:
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except OSError:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def main(argv: Optional[List[str]] = None) -> int:
    """Entry point of the ``rknnlite`` command; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return args.func(args)
    except KeyInvalidError as e:
        _fail(f"{e.message} (wrong key, or a model bound to another device)")
    except (RKNNError, CLIError) as e:
        _fail(getattr(e, "message", None) or str(e))
    except OSError as e:
        _fail(f"{e.filename or ''}{': ' if e.filename else ''}{e.strerror or e}")
    except KeyboardInterrupt:
        _fail("interrupted")
    return 1


def _fail(message: str) -> None:
    print(f"rknnlite: error: {message}", file=sys.stderr)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
