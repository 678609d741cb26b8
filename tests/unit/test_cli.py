"""The ``fairbench`` command's own handling, shared by every subcommand."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_a_reader_that_goes_away_ends_the_command_without_a_traceback() -> None:
    """``fairbench validate ... | head``: the pipe closes before the output is written."""
    command = [sys.executable, "-m", "fairbench", "validate", str(REPO / "campaigns/demo.yml")]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert process.stdout is not None
    process.stdout.close()
    _, stderr = process.communicate(timeout=120)
    assert stderr == b"" and process.returncode == 141
