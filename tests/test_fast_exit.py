"""``guardrepro.cli.exit_with``: the console script's exit, fast once torch is loaded.

Each case runs in a child process (the function ends its process): the exit
code, everything printed (stdout not a terminal, so block-buffered: lost
unless flushed) and an ``atexit`` handler's file must all be there.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHILD = """
import atexit, sys
{imports}
from guardrepro.cli import exit_with
atexit.register(lambda: open(sys.argv[1], "w").write("exit handlers ran"))
print("the verb's last line", end="")
sys.stderr.write("a warning")
exit_with(3)
"""


@pytest.mark.parametrize("imports", ["", "import torch  # noqa: F401"])
def test_the_code_the_output_and_the_exit_handlers_survive(tmp_path: Path,
                                                           imports: str) -> None:
    if imports:
        pytest.importorskip("torch")
    marker = tmp_path / "marker"
    script = textwrap.dedent(CHILD.format(imports=imports))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", script, str(marker)], capture_output=True,
                          text=True, env=env, timeout=300, check=False)
    assert done.returncode == 3, done.stderr
    assert done.stdout == "the verb's last line"
    assert done.stderr == "a warning"
    assert marker.read_text() == "exit handlers ran"
