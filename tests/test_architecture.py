"""The layers of docs/architecture.md hold (issue 25): imports only point down, no cycle between
packages, no read of another package's ``_private`` names.

The layer table is read from docs/architecture.md (the one place it is written); every module of
``rknnlite`` and the Python-level imports of every ``cython/**/*.pyx`` are parsed with ``ast``
(module- and function-level imports, relative ones resolved).  The self-tests run the same check
on small fake packages, so that it cannot pass by finding nothing.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Set, Tuple

import pytest

REPO = Path(__file__).resolve().parent.parent
DOC = REPO / "docs" / "architecture.md"
LAYERS_MARK = "<!-- layers:"

#: (importing module, problem text) pairs allowed to break a rule.  Kept empty: fix the import instead.
EXCEPTIONS: frozenset = frozenset()

_PRIVATE = re.compile(r"^_(?!_)\w+$")  # one leading underscore (not "_", not a dunder)
_OWN = ("self", "cls")


def _is_private(name: str) -> bool:
    return bool(_PRIVATE.match(name))


# -- the layer table ---------------------------------------------------------------------------------


def read_layers(text: str) -> Dict[str, int]:
    """Unit -> layer from the table after the layers marker: ``| 0 | `a`, `b` | ... |`` rows."""
    start = text.index(LAYERS_MARK)
    units: Dict[str, int] = {}
    rows = 0
    for line in text[start:].splitlines()[1:]:
        line = line.strip()
        if not line:
            if rows:
                break
            continue
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        if not cells[0].isdigit():
            continue  # the header and the separator
        layer = int(cells[0])
        assert layer == rows, f"layers must be numbered 0, 1, 2, ... in order; row {rows} says {layer}"
        for name in re.findall(r"`([^`]+)`", cells[1]):
            assert name not in units, f"{name} is in two layers"
            units[name] = layer
        rows += 1
    assert units, "no layer table after the layers marker"
    return units


def read_picture(text: str) -> Dict[str, int]:
    """Unit -> layer from the picture (the first fenced block): ``N  unit  unit   description``."""
    block = text.split("```", 2)[1]
    units: Dict[str, int] = {}
    for line in block.splitlines():
        head = re.split(r"\s{3,}", line.strip(), maxsplit=1)[0].split()
        if head and head[0].isdigit():
            for name in head[1:]:
                units[name] = int(head[0])
    return units


def unit_of(module: str, package: str, units: Iterable[str]) -> Optional[str]:
    """The unit of ``module``: the longest unit name it is or lies under (``package`` itself is
    the unit named ``package`` only for the package's own ``__init__``)."""
    if module == package:
        return package if package in units else None
    rel = module[len(package) + 1:]
    best = None
    for unit in units:
        if unit != package and (rel == unit or rel.startswith(unit + ".")):
            if best is None or len(unit) > len(best):
                best = unit
    return best


# -- parsing -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Import:
    """One import: ``importer`` imports module ``target`` (or ``name`` from it) at ``line``."""

    importer: str
    line: int
    target: str
    name: Optional[str] = None
    alias: Optional[str] = None


@dataclass
class Source:
    """One module: its name, path, whether it is a package ``__init__``, a .pyx, its text."""

    module: str
    path: Path
    is_pkg: bool
    native: bool
    text: str


def sources(package_dir: Path, package: str, native_dir: Optional[Path]) -> List[Source]:
    """Every ``.py`` under ``package_dir``, and every ``.pyx`` under ``native_dir`` (with the
    ``.pxi`` files it includes) as the module ``<package>._native.<stem>`` (setup.py's naming)."""
    found = []
    for path in sorted(package_dir.rglob("*.py")):
        parts = list(path.relative_to(package_dir.parent).with_suffix("").parts)
        is_pkg = parts[-1] == "__init__"
        if is_pkg:
            parts = parts[:-1]
        found.append(Source(".".join(parts), path, is_pkg, False, path.read_text(encoding="utf-8")))
    if native_dir is not None:
        for path in sorted(native_dir.rglob("*.pyx")):
            text = path.read_text(encoding="utf-8")
            # a Cython ``include`` is part of the module: its imports are the module's
            for name in re.findall(r'^include "([^"]+)"', text, re.M):
                text += "\n" + (path.parent / name).read_text(encoding="utf-8")
            found.append(Source(f"{package}._native.{path.stem}", path, False, True, text))
    return found


def _absolute(src: Source, level: int, name: Optional[str]) -> str:
    if not level:
        return name or ""
    base = src.module.split(".") if src.is_pkg else src.module.split(".")[:-1]
    base = base[:len(base) - (level - 1)]
    return ".".join(base + ([name] if name else []))


def imports_of(src: Source, modules: Set[str], package: str) -> List[Import]:
    """The imports of ``src`` that reach ``package`` (``from x import m`` of a module ``x.m``
    is an import of ``x.m``)."""
    found: List[Import] = []

    def add(line: int, base: str, names: List[Tuple[str, Optional[str]]]) -> None:
        if not (base == package or base.startswith(package + ".")):
            return
        for name, alias in names:
            if name == "*":
                found.append(Import(src.module, line, base))
            elif f"{base}.{name}" in modules:
                found.append(Import(src.module, line, f"{base}.{name}", alias=alias or name))
            else:
                found.append(Import(src.module, line, base, name, alias or name))

    if src.native:
        # Cython: the Python-level imports only (``cimport`` is C); a parenthesised name list is
        # joined onto its first line (the newlines it had follow it, so line numbers stay)
        text = re.sub(r"\(([^)]*)\)", lambda m: f"({m.group(1)})".replace("\n", " ") + "\n" * m.group(1).count("\n"),
                      src.text)
        for no, line in enumerate(text.splitlines(), 1):
            m = re.match(r"\s*from\s+(\.*)([\w.]*)\s+import\s+(.+)", line)
            if m:
                listed = m.group(3).split("#")[0].strip().strip("()")
                names = [(p.split(" as ")[0].strip(), None) for p in listed.split(",")]
                add(no, _absolute(src, len(m.group(1)), m.group(2) or None), [n for n in names if n[0]])
                continue
            m = re.match(r"\s*import\s+([\w., ]+)", line)
            if m:
                for part in m.group(1).split(","):
                    target = part.split(" as ")[0].strip()
                    if target == package or target.startswith(package + "."):
                        found.append(Import(src.module, no, target))
        return found
    tree = ast.parse(src.text, str(src.path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name == package or a.name.startswith(package + "."):
                    found.append(Import(src.module, node.lineno, a.name, alias=a.asname))
        elif isinstance(node, ast.ImportFrom):
            add(node.lineno, _absolute(src, node.level, node.module), [(a.name, a.asname) for a in node.names])
        elif (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str) and node.args[0].value.startswith(package)
              and ((isinstance(node.func, ast.Attribute) and node.func.attr == "import_module")
                   or (isinstance(node.func, ast.Name) and node.func.id == "__import__"))):
            found.append(Import(src.module, node.lineno, node.args[0].value))
    return found


def private_definitions(src: Source) -> Set[str]:
    """The private names ``src`` defines: functions, classes, methods, assigned names,
    ``self._x``/``cls._x`` attributes and ``__slots__`` entries."""
    if src.native:
        return set(re.findall(r"\b(?:self|cls)\.(_\w+)\s*=", src.text)) | set(re.findall(r"\bdef\s+(_\w+)", src.text)) \
            | set(re.findall(r"\bcdef\s+(?:public\s+|readonly\s+)?[\w*]+\s+(_\w+)", src.text))
    names: Set[str] = set()
    for node in ast.walk(ast.parse(src.text, str(src.path))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif (isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store)
              and isinstance(node.value, ast.Name) and node.value.id in _OWN):
            names.add(node.attr)
        elif (isinstance(node, ast.Assign) and isinstance(node.value, (ast.Tuple, ast.List))
              and any(isinstance(t, ast.Name) and t.id == "__slots__" for t in node.targets)):
            names.update(e.value for e in node.value.elts if isinstance(e, ast.Constant) and isinstance(e.value, str))
    return {n for n in names if _is_private(n)}


# -- the check -----------------------------------------------------------------------------------------


def check(package_dir: Path, layers: Dict[str, int], native_dir: Optional[Path] = None,
          exceptions: Iterable[Tuple[str, str]] = ()) -> List[str]:
    """Every problem of the package in ``package_dir`` against ``layers`` (unit -> layer), as
    ``"module:line: text"`` lines; ``exceptions`` drops the ``(module, text)`` pairs listed."""
    package = package_dir.name
    srcs = sources(package_dir, package, native_dir)
    modules = {s.module for s in srcs}
    problems: List[Tuple[str, int, str]] = []
    unit = {}
    for s in srcs:
        unit[s.module] = unit_of(s.module, package, layers)
        if unit[s.module] is None:
            problems.append((s.module, 0, f"{s.path.name} is in no layer of the table"))
    edges: Dict[Tuple[str, str], Import] = {}
    foreign: Dict[str, Dict[str, str]] = defaultdict(dict)  # module -> local name -> unit it came from
    for s in srcs:
        here = unit[s.module]
        if here is None:
            continue
        for imp in imports_of(s, modules, package):
            there = unit_of(imp.target, package, layers)
            if there is None or there == here:
                continue
            edges.setdefault((here, there), imp)
            if layers[there] > layers[here]:
                problems.append((s.module, imp.line, f"imports {imp.target} ({there}, layer {layers[there]}) "
                                                     f"from {here} (layer {layers[here]}): an upward import"))
            if imp.name is not None and _is_private(imp.name):
                problems.append((s.module, imp.line, f"imports the private name {imp.name} of {imp.target}"))
            if imp.alias:
                foreign[s.module][imp.alias.split(".")[0]] = there
    # cycles between units
    graph: Dict[str, Set[str]] = defaultdict(set)
    for a, b in edges:
        graph[a].add(b)

    def reaches(a: str, b: str) -> bool:
        seen, todo = set(), [a]
        while todo:
            x = todo.pop()
            if x == b:
                return True
            if x not in seen:
                seen.add(x)
                todo.extend(graph[x])
        return False

    for (a, b), imp in sorted(edges.items()):
        if reaches(b, a):
            problems.append((imp.importer, imp.line, f"imports {imp.target}: {a} -> {b} closes a cycle "
                                                     f"between packages ({b} leads back to {a})"))
    # private names read across units
    defined: Dict[str, Set[str]] = defaultdict(set)
    for s in srcs:
        if unit[s.module] is not None:
            defined[unit[s.module]] |= private_definitions(s)
    for s in srcs:
        here = unit[s.module]
        if here is None or s.native:
            continue
        for node in ast.walk(ast.parse(s.text, str(s.path))):
            if not isinstance(node, ast.Attribute) or not _is_private(node.attr):
                continue
            value = node.value
            if isinstance(value, ast.Name) and value.id in _OWN:
                continue
            if isinstance(value, ast.Name) and value.id in foreign[s.module]:
                problems.append((s.module, node.lineno, f"reads {value.id}.{node.attr}, private to "
                                                        f"{foreign[s.module][value.id]}"))
                continue
            if node.attr in defined[here]:
                continue
            owners = sorted(u for u, names in defined.items() if u != here and node.attr in names)
            if owners:
                problems.append((s.module, node.lineno, f"reads .{node.attr}, a private name of "
                                                        f"{', '.join(owners)} (not defined in {here})"))
    allowed = set(exceptions)
    return sorted(f"{m}:{line}: {text}" for m, line, text in set(problems) if (m, text) not in allowed)


# -- the package ---------------------------------------------------------------------------------------


def test_the_package_keeps_its_layers():
    layers = read_layers(DOC.read_text(encoding="utf-8"))
    problems = check(REPO / "rknnlite", layers, REPO / "cython", EXCEPTIONS)
    assert problems == [], "\n".join(problems)


def test_the_picture_matches_the_table():
    text = DOC.read_text(encoding="utf-8")
    assert read_picture(text) == read_layers(text)


def test_the_table_names_what_design_md_orders():
    layers = read_layers(DOC.read_text(encoding="utf-8"))
    order = ["errors", "tensors", "model", "backends", "runtime", "api"]
    assert [layers[u] for u in order] == sorted(layers[u] for u in order)
    assert layers["constants"] == layers["errors"] < layers["platform"] == layers["tensors"]
    assert layers["runtime"] < min(layers[u] for u in ("api", "pipeline", "vision", "daemon", "toolkit", "cli"))


def test_importing_the_package_loads_no_backend():
    """``import rknnlite`` stays light: the software executor and the npu adapter load when a
    Context needs them (a board never loads the executor, a host never the binding)."""
    code = "import sys, rknnlite; print(' '.join(sorted(m for m in sys.modules if m.startswith('rknnlite.'))))"
    loaded = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                            check=True).stdout.split()
    assert "rknnlite.runtime.context" in loaded and "rknnlite.tensors.attr" in loaded
    heavy = ("rknnlite.backends.software", "rknnlite.backends.npu", "rknnlite._native", "rknnlite.toolkit")
    assert [m for m in loaded if m.startswith(heavy)] == []


# -- self-tests: the check finds what it must --------------------------------------------------------


def _write(root: Path, files: Dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root / "fakepkg"


FAKE_LAYERS = {"_native": 0, "low": 0, "mid": 1, "side": 1, "high": 2, "fakepkg": 2}
CLEAN = {
    "fakepkg/__init__.py": "from .high import run\n",
    "fakepkg/low/__init__.py": "_SECRET = 1\n\nclass Box:\n    def __init__(self):\n        self._inside = 1\n",
    "fakepkg/mid.py": "from .low import Box\n\ndef make():\n    from . import low\n    return Box(), low.Box\n",
    "fakepkg/side.py": "from fakepkg.mid import make\n",
    "fakepkg/high/__init__.py": "def run():\n    from ..side import make\n    return make()\n",
}


def test_a_clean_fake_package_passes(tmp_path):
    assert check(_write(tmp_path, CLEAN), FAKE_LAYERS) == []


@pytest.mark.parametrize("files, expected", [
    ({"fakepkg/low/__init__.py": "def f():\n    from ..high import run\n"},  # function-level, relative
     "fakepkg.low:2: imports fakepkg.high (high, layer 2) from low (layer 0): an upward import"),
    ({"fakepkg/low/deep.py": "import fakepkg.mid\n"},
     "fakepkg.low.deep:1: imports fakepkg.mid (mid, layer 1) from low (layer 0): an upward import"),
    ({"fakepkg/mid.py": "from .side import x\n", "fakepkg/side.py": "from .mid import y\n"},
     "fakepkg.mid:1: imports fakepkg.side: mid -> side closes a cycle between packages (side leads back to mid)"),
    ({"fakepkg/high/__init__.py": "from ..low import _SECRET\n"},
     "fakepkg.high:1: imports the private name _SECRET of fakepkg.low"),
    ({"fakepkg/high/__init__.py": "from .. import low\nX = low._SECRET\n"},
     "fakepkg.high:2: reads low._SECRET, private to low"),
    ({"fakepkg/high/__init__.py": "def peek(box):\n    return box._inside\n"},
     "fakepkg.high:2: reads ._inside, a private name of low (not defined in high)"),
    ({"fakepkg/stray.py": "X = 1\n"}, "fakepkg.stray:0: stray.py is in no layer of the table"),
])
def test_the_check_reports(tmp_path, files, expected):
    problems = check(_write(tmp_path, {**CLEAN, **files}), FAKE_LAYERS)
    assert expected in problems, problems


def test_the_check_reads_pyx_imports(tmp_path):
    package = _write(tmp_path, CLEAN)
    native = tmp_path / "cython"
    native.mkdir()
    (native / "kern.pyx").write_text("from libc.stdint cimport int32_t\nfrom fakepkg.low import Box\n"
                                     "from fakepkg.mid import (make,\n    make as other)\n")
    assert check(package, FAKE_LAYERS, native) == [
        "fakepkg._native.kern:3: imports fakepkg.mid (mid, layer 1) from _native (layer 0): an upward import"]


def test_the_check_reads_the_pxi_files_a_pyx_includes(tmp_path):
    package = _write(tmp_path, CLEAN)
    native = tmp_path / "cython"
    native.mkdir()
    (native / "kern.pyx").write_text('from libc.stdint cimport int32_t\n\ninclude "shared.pxi"\n')
    (native / "shared.pxi").write_text("from fakepkg.mid import make\n")
    (problem,) = check(package, FAKE_LAYERS, native)
    assert "imports fakepkg.mid (mid, layer 1) from _native (layer 0): an upward import" in problem


def test_exceptions_drop_only_what_they_name(tmp_path):
    package = _write(tmp_path, {**CLEAN, "fakepkg/high/__init__.py": "from ..low import _SECRET\n"})
    (problem,) = check(package, FAKE_LAYERS)
    module, _, text = problem.split(":", 2)
    assert check(package, FAKE_LAYERS, exceptions={(module, text.strip())}) == []
    assert check(package, FAKE_LAYERS, exceptions={(module, "another text")}) == [problem]


def test_the_table_is_read_in_order():
    text = f"{LAYERS_MARK} -->\n\n| Layer | Units |\n|---|---|\n| 0 | `a`, `b` |\n| 1 | `c` |\n"
    assert read_layers(text) == {"a": 0, "b": 0, "c": 1}
    with pytest.raises(AssertionError, match="numbered"):
        read_layers(f"{LAYERS_MARK} -->\n| 1 | `a` |\n")
