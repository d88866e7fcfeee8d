"""README starts with the two quickstart commands, and .ci/run runs the second verbatim, then the
framework loaders' command README gives next."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def quickstart() -> list:
    text = (REPO / "README.md").read_text()
    block = re.search(r"```sh\n(.*?)```", text, re.S)
    assert block and text.index(block.group(0)) < text.index("## "), "README must open with the commands"
    return [line for line in block.group(1).splitlines() if line.strip()]


def test_readme_opens_with_exactly_two_commands():
    commands = quickstart()
    assert len(commands) == 2
    assert commands[0].endswith("rknnlite demo")
    assert "pytest" in commands[1]


def test_ci_runs_the_second_command_verbatim():
    ci = (REPO / ".ci" / "run").read_text().splitlines()
    assert quickstart()[1] in ci


def loaders_command() -> str:
    text = (REPO / "README.md").read_text()
    blocks = re.findall(r"```sh\n(.*?)```", text[:text.index("## ")], re.S)
    assert len(blocks) == 2, "README gives the loaders' command in a second block before its first section"
    (line,) = [line for line in blocks[1].splitlines() if line.strip()]
    return line


def test_ci_then_runs_the_loaders_command_verbatim():
    ci = (REPO / ".ci" / "run").read_text().splitlines()
    line = loaders_command()
    assert '".[test-loaders]"' in line and "tests/test_load_pytorch.py" in line
    assert line in ci and ci.index(line) > ci.index(quickstart()[1])
