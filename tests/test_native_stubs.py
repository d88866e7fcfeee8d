"""The .pyi stubs of rknnlite._native: every name the Python code takes from a compiled module
(``from rknnlite._native.X import name``, or ``X.name`` / ``alias.name`` after importing the
module) exists in the module's stub and in the compiled module."""

import ast
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "rknnlite"
NATIVE = PKG / "_native"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _absolute(path: Path, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = _module_name(path).split(".")
    if path.name != "__init__.py":
        base = base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def native_uses(path: Path, tree: ast.AST) -> set:
    """{(module, name)} of the compiled modules' names this file uses."""
    uses, aliases = set(), {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            mod = _absolute(path, node)
            for a in node.names:
                if mod == "rknnlite._native":
                    aliases[a.asname or a.name] = a.name
                elif mod.startswith("rknnlite._native."):
                    uses.add((mod.rsplit(".", 1)[1], a.name))
    # functions whose body returns an imported module: `_native().name`
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef):
            for sub in ast.walk(node):
                if isinstance(sub, ast.Return) and isinstance(sub.value, ast.Name) and sub.value.id in aliases:
                    aliases[node.name + "()"] = aliases[sub.value.id]
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        v = node.value
        key = v.id if isinstance(v, ast.Name) else (
            v.func.id + "()" if isinstance(v, ast.Call) and isinstance(v.func, ast.Name) else None)
        if key in aliases:
            uses.add((aliases[key], node.attr))
    return uses


def stub_names(module: str) -> set:
    tree = ast.parse((NATIVE / f"{module}.pyi").read_text())
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return names


def all_uses() -> set:
    uses = set()
    for path in PKG.rglob("*.py"):
        uses |= native_uses(path, ast.parse(path.read_text(), str(path)))
    return uses


def test_the_python_code_uses_compiled_names():
    # the scan itself finds the known users (a broken scan would make the tests below vacuous)
    uses = all_uses()
    assert ("layout_kernels", "VECTORIZED") in uses or any(m == "layout_kernels" for m, _ in uses)
    assert any(m == "conv_kernels" for m, _ in uses)
    assert ("thread_pool", "NativePool") in uses
    assert any(m == "custom_op_plugin" for m, _ in uses)


def test_every_compiled_module_has_a_stub():
    sources = {p.stem for p in (ROOT / "cython").glob("*/*.pyx")}
    stubs = {p.stem for p in NATIVE.glob("*.pyi")}
    assert sources == stubs


def test_every_used_name_is_in_the_stubs():
    missing = sorted(f"{m}.{n}" for m, n in all_uses() if n not in stub_names(m))
    assert not missing, f"names the Python code uses but the stubs of rknnlite._native lack: {missing}"


def test_every_used_name_is_in_the_compiled_modules():
    uses = all_uses()
    missing = []
    for module in sorted({m for m, _ in uses}):
        try:
            compiled = importlib.import_module(f"rknnlite._native.{module}")
        except ImportError as exc:  # pragma: no cover - an unbuilt checkout
            pytest.skip(f"rknnlite._native.{module} is not built: {exc}")
        missing += [f"{module}.{n}" for m, n in uses if m == module and not hasattr(compiled, n)]
    assert not missing, f"names the Python code uses but the compiled modules lack: {sorted(missing)}"


def test_the_scan_sees_each_import_form(tmp_path):
    src = ("from rknnlite._native.thread_pool import NativePool\n"
           "from .._native import conv_kernels as ck\n"
           "def _native():\n    from .._native import custom_op_plugin\n    return custom_op_plugin\n"
           "ck.gemm_isa()\n_native().NativeOp\n")
    path = PKG / "backends" / "fake.py"
    assert native_uses(path, ast.parse(src)) == {("thread_pool", "NativePool"), ("conv_kernels", "gemm_isa"),
                                                 ("custom_op_plugin", "NativeOp")}

