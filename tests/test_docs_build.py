"""The documentation site (issue 10 point 5): ``mkdocs build --strict`` succeeds with no
warning, the API pages are rendered from the docstrings (every public name of DESIGN.md
§3 has its own entry), Sphinx roles in docstrings become links, and the pipeline guide's
complete example runs as printed."""

from __future__ import annotations

import html
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.slow  # a full site build: 5-15 s on 2 shared cores

# DESIGN.md §3: the public Context calls and attributes
CONTEXT_NAMES = ["inputs", "outputs", "native_inputs", "native_outputs", "query", "run", "set_core_mask",
                 "set_batch_core_num", "input_ranges", "set_input_shapes", "create_mem", "set_io_mem",
                 "run_bound", "dup", "register_custom_op", "perf_detail", "perf_run", "mem_size",
                 "sdk_version", "custom_string", "close"]
# page -> identifiers (heading anchors) it must document
PAGES = {
    "api/context.html": ["rknnlite.Context"] + [f"rknnlite.Context.{n}" for n in CONTEXT_NAMES],
    "api/tensors.html": ["rknnlite.TensorAttr", "rknnlite.TensorAttr.replace", "rknnlite.TensorMem",
                         "rknnlite.TensorMem.array", "rknnlite.TensorMem.view", "rknnlite.TensorMem.sync",
                         "rknnlite.TensorMem.destroy"],
    "api/constants.html": [f"rknnlite.constants.{n}" for n in
                           ["TensorType", "TensorFormat", "QntType", "CoreMask", "QueryCmd", "InitFlag",
                            "MemAllocFlag", "MemSyncMode"]]
    + ["rknnlite.constants.QueryCmd.IN_OUT_NUM", "rknnlite.constants.CoreMask.CORE_0_1_2",
       "rknnlite.constants.InitFlag.DISABLE_FLUSH_INPUT_MEM_CACHE"],
    "api/errors.html": [f"rknnlite.errors.{n}" for n in
                        ["RKNNError", "RKNNTimeoutError", "DeviceUnavailableError", "RKNNMemoryError",
                         "InvalidParamError", "ModelInvalidError", "ContextInvalidError", "InputInvalidError",
                         "OutputInvalidError", "DeviceMismatchError", "IncompatiblePrecompiledModelError",
                         "IncompatibleOptimizationLevelError", "TargetPlatformMismatchError", "DecryptError",
                         "KeyInvalidError"]],
    "api/rknnlite.html": ["rknnlite.api.RKNNLite"] + [f"rknnlite.api.RKNNLite.{n}" for n in
                                                      ["load_rknn", "init_runtime", "inference", "get_sdk_version",
                                                       "list_support_target_platform", "release"]],
    "api/pipeline.html": [f"rknnlite.pipeline.AsyncInferQueue.{n}" for n in
                          ["submit", "start_async", "set_callback", "infer", "wait_all", "close"]]
    + [f"rknnlite.pipeline.Pipeline.{n}" for n in ["push", "pop", "close", "stats"]]
    + ["rknnlite.pipeline.Result", "rknnlite.pipeline.FrameError", "rknnlite.pipeline.Carry"],
    "api/toolkit.html": [f"rknnlite.toolkit.RKNN.{n}" for n in ["config", "load_onnx", "build", "export_rknn"]]
    + ["rknnlite.toolkit.onnx_edit"],
    "api/vision.html": [f"rknnlite.vision.{n}" for n in
                        ["letterbox", "LetterboxTransform", "Detections", "YOLOv5", "YOLOv7", "YOLOX", "YOLOv8",
                         "YOLO11", "YOLOv8Seg", "YOLOv8Pose", "RetinaFace", "SCRFD", "top_k", "segmentation_mask",
                         "nms", "draw_detections", "DetectionStages"]]
    + ["rknnlite.vision.Detections.draw", "rknnlite.vision.Detections.to_json",
       "rknnlite.vision.LetterboxTransform.boxes_to_source"],
}


def text_of(page: str) -> str:
    """The visible text of an HTML page, whitespace collapsed."""
    body = re.sub(r"(?s)<(script|style)\b.*?</\1>", " ", page)
    return " ".join(html.unescape(re.sub(r"<[^>]+>", "", body)).split())


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """Build the site once with ``mkdocs build --strict``, from outside the repo."""
    pytest.importorskip("mkdocs", reason="mkdocs is not installed (pip install -e '.[docs]')")
    pytest.importorskip("mkdocstrings_handlers.python",
                        reason="mkdocstrings-python is not installed (pip install -e '.[docs]')")
    out = tmp_path_factory.mktemp("site")
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(REPO / "mkdocs.yml"),
                           "--site-dir", str(out)], cwd=str(out.parent), capture_output=True, text=True,
                          timeout=600)
    return proc, out


def test_strict_build_succeeds_without_warnings(site):
    proc, out = site
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log
    assert "WARNING" not in log, log
    assert (out / "api" / "context.html").is_file()


def _nav_files(entries) -> list:
    files = []
    for entry in entries:
        value = next(iter(entry.values())) if isinstance(entry, dict) else entry
        files += _nav_files(value) if isinstance(value, list) else [value]
    return files


def test_every_docs_page_is_built_and_in_the_nav(site):
    import yaml  # a dependency of mkdocs

    _, out = site  # pages are written even when --strict fails the build
    pages = sorted(p.relative_to(REPO / "docs").as_posix() for p in (REPO / "docs").rglob("*.md"))
    assert "pipeline.md" in pages and "api/context.md" in pages
    nav = _nav_files(yaml.safe_load((REPO / "mkdocs.yml").read_text())["nav"])
    assert sorted(nav) == pages, "mkdocs.yml's nav must list every page under docs/, once"
    for page in pages:
        assert (out / page).with_suffix(".html").is_file(), page


@pytest.mark.parametrize("page", sorted(PAGES))
def test_api_pages_document_every_public_name(site, page):
    _, out = site  # pages are written even when --strict fails the build
    content = (out / page).read_text()
    missing = [name for name in PAGES[page] if f'id="{name}"' not in content]
    assert not missing, f"{page} has no entry for {missing}"


def test_context_page_renders_the_docstrings(site):
    _, out = site  # pages are written even when --strict fails the build
    import rknnlite

    text = text_of((out / "api" / "context.html").read_text())
    for fn in (rknnlite.Context.run, rknnlite.Context.dup, rknnlite.Context.create_mem):
        first = " ".join(fn.__doc__.strip().split("\n\n")[0].split())
        first = re.sub(r":\w+:`~?([^`]+)`", lambda m: m.group(1).rsplit(".", 1)[-1], first).replace("``", "")
        assert first in text, f"{fn.__qualname__}'s docstring is not on the page: {first!r}"
    # the Args/Raises sections became tables, not literal "Args:" text
    assert "Args:" not in text and "InputInvalidError" in text


def test_sphinx_roles_become_links(site):
    _, out = site  # pages are written even when --strict fails the build
    for page in (out / "api").glob("*.html"):
        content = page.read_text()
        assert not re.search(r":(meth|class|func|attr|mod|data|exc):", text_of(content)), page.name
    context = (out / "api" / "context.html").read_text()
    # Context.run's docstring says "use :meth:`dup` for parallel runs"
    assert re.search(r'<a [^>]*href="#rknnlite\.Context\.dup"[^>]*><code>dup</code></a>', context)
    # a role naming another page's object links there
    assert 'href="constants.html#rknnlite.constants.InitFlag"' in context


def _roles_extension():
    spec = importlib.util.spec_from_file_location("griffe_roles", REPO / "docs" / "api" / "griffe_roles.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_role_targets_resolve_as_sphinx_would():
    griffe = pytest.importorskip("griffe", reason="griffe is not installed (pip install -e '.[docs]')")
    roles = _roles_extension()
    pkg = griffe.load("rknnlite", search_paths=[str(REPO)], allow_inspection=False)
    run = pkg["runtime.context.Context.run"]
    edit = pkg["toolkit.edit"]
    assert roles._resolve("dup", run, pkg) == "rknnlite.runtime.context.Context.dup"          # a sibling
    assert roles._resolve("Context.close", run, pkg) == "rknnlite.runtime.context.Context.close"
    assert roles._resolve("rknnlite.Context", run, pkg) == "rknnlite.runtime.context.Context"  # re-export
    assert roles._resolve("rknnlite.errors.InputInvalidError", run, pkg) == "rknnlite.errors.InputInvalidError"
    assert roles._resolve(".formula", edit, pkg) == "rknnlite.toolkit.formula"                # relative module
    assert roles._resolve("InvalidParamError", edit, pkg) == "rknnlite.errors.InvalidParamError"  # an import
    assert roles._resolve("no_such_name", run, pkg) is None
    assert roles._resolve("numpy.ndarray", run, pkg) is None
    ref = roles._reference("~rknnlite.constants.CoreMask", run, pkg)
    assert ref == '<autoref identifier="rknnlite.constants.CoreMask" optional><code>CoreMask</code></autoref>'
    assert roles._reference("the pool <AsyncInferQueue>", pkg["pipeline.pipeline.Pipeline"], pkg) == (
        '<autoref identifier="rknnlite.pipeline.infer_queue.AsyncInferQueue" optional>'
        "<code>the pool</code></autoref>")
    assert roles._reference("unknown.thing", run, pkg) == "<code>unknown.thing</code>"


def _guide_example() -> str:
    guide = (REPO / "docs" / "pipeline.md").read_text()
    section = guide.split("## A complete example", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(blocks) == 1, "the complete example is one python block"
    return blocks[0]


def test_pipeline_guide_example_runs_off_board(tmp_path):
    pytest.importorskip("onnx", reason="the guide's example converts an ONNX model (extra 'toolkit')")
    script = tmp_path / "example.py"
    script.write_text(_guide_example())
    proc = subprocess.run([sys.executable, str(script)], cwd=str(tmp_path), capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("software backend, 2 contexts")
    futures = next(line for line in lines if line.startswith("futures:"))
    callbacks = next(line for line in lines if line.startswith("callbacks:"))
    assert futures.split(":", 1)[1] == callbacks.split(":", 1)[1]  # the same frames, the same results
    frames = [int(m.group(1)) for m in (re.match(r"frame (\d+): class \d", line) for line in lines) if m]
    assert frames == list(range(20))  # every frame, in push order
    assert lines[-1].startswith("20 frames")
