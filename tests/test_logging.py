"""The package never touches global logging state; RKNN_LOG_LEVEL maps like librknnrt's."""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap

import pytest

from rknnlite.runtime import log


def test_import_and_use_leave_root_logger_alone():
    script = textwrap.dedent(
        """
        import logging, json
        root = logging.getLogger()
        before = (list(root.handlers), root.level, logging.getLevelName("INFO"), logging.getLevelName(20),
                  dict(logging.root.manager.loggerDict).keys() - {"rknnlite"})
        import numpy as np
        import rknnlite
        from rknnlite.demo import DEMO_MODEL_PATH, demo_image
        with rknnlite.Context(str(DEMO_MODEL_PATH)) as ctx:
            ctx.run([demo_image()], data_format="nchw")
        from rknnlite.api import RKNNLite
        rk = RKNNLite()
        assert rk.load_rknn(str(DEMO_MODEL_PATH)) == 0 and rk.init_runtime() == 0
        assert rk.inference([demo_image()], data_format="nchw") is not None
        assert rk.load_rknn("/no/such/model.rknn") == -1
        rk.release()
        after = (list(root.handlers), root.level, logging.getLevelName("INFO"), logging.getLevelName(20))
        assert before[:4] == after, (before, after)
        assert logging.getLevelName("INFO") == 20
        assert root.handlers == [] and root.level == logging.WARNING
        own = logging.getLogger("rknnlite").handlers
        assert len(own) == 1 and type(own[0]) is logging.NullHandler
        print("ok")
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok" and out.stderr == ""


@pytest.mark.parametrize("value, level", [("0", logging.ERROR), ("1", logging.WARNING), ("2", logging.INFO),
                                          ("3", logging.DEBUG), ("4", logging.DEBUG), ("5", log.TRACE),
                                          ("9", log.TRACE), ("-3", logging.ERROR)])
def test_rknn_log_level_mapping(value, level):
    logger = logging.getLogger("rknnlite")
    saved, root_level = logger.level, logging.getLogger().level
    try:
        assert log.apply_env_level({"RKNN_LOG_LEVEL": value}) == level
        assert logger.level == level
        assert logging.getLogger().level == root_level
    finally:
        logger.setLevel(saved)


def test_unset_or_bad_level_changes_nothing(caplog):
    logger = logging.getLogger("rknnlite")
    saved = logger.level
    assert log.apply_env_level({}) is None
    with caplog.at_level(logging.WARNING, logger="rknnlite"):
        assert log.apply_env_level({"RKNN_LOG_LEVEL": "loud"}) is None
    assert "not an integer" in caplog.text
    assert logger.level == saved


def test_trace_level_has_no_global_name():
    assert logging.getLevelName(log.TRACE) == f"Level {log.TRACE}"


def test_verbose_rknnlite_writes_its_own_output_only(tmp_path):
    script = textwrap.dedent(
        f"""
        import logging
        from rknnlite.api import RKNNLite
        rk = RKNNLite(verbose=True, verbose_file={str(tmp_path / "lite.log")!r})
        rk.load_rknn("/no/such/model.rknn")
        rk.release()
        assert logging.getLogger().handlers == [] and logging.getLevelName("INFO") == 20
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "E RKNN: Invalid RKNN model path: /no/such/model.rknn" in out.stderr
    assert "Invalid RKNN model path" in (tmp_path / "lite.log").read_text()


def test_verbose_lines_are_not_printed_twice_under_the_applications_logging():
    """With ``logging.basicConfig(level=INFO)`` every verbose line printed twice (the
    application's handler and the verbose one); a level the application does not show is
    still printed by verbose."""
    script = textwrap.dedent(
        """
        import logging
        logging.basicConfig(level=logging.WARNING, format="APP %(levelname)s %(message)s")
        from rknnlite.api import RKNNLite
        rk = RKNNLite(verbose=True)
        rk.load_rknn("/no/such/model.rknn")
        rk._log.info("an info line")
        rk.release()
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stderr.count("Invalid RKNN model path: /no/such/model.rknn") == 1, out.stderr
    assert "APP ERROR" in out.stderr
    assert "I RKNN: an info line" in out.stderr and "APP INFO" not in out.stderr
