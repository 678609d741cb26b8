"""Progress display: a bar redrawn in place on a terminal, plain lines elsewhere."""

from __future__ import annotations

import io
import json
from pathlib import Path

from fairbench.measure.progress import Progress
from fairbench.measure.records import RequestRecord


def finished(index: int, *, error: str = "") -> RequestRecord:
    return RequestRecord(index, 8, 4, output_len=0 if error else 4, error=error)


def test_live_bar_redraws_one_line_and_ends_with_the_summary() -> None:
    stream = io.StringIO()
    progress = Progress(stream, live=True)
    progress.start("c4-r0", 2)
    progress.request_done(finished(0))
    progress.request_done(finished(1, error="HTTP 500: boom"))
    progress.finish("1/2 ok")
    text = stream.getvalue()
    assert text.startswith("\r\033[Kc4-r0 [" + "." * 24 + "] 0/2 requests, 0 failed")
    assert "[" + "#" * 24 + "] 2/2 requests, 1 failed" in text
    assert text.endswith("\r\033[Kc4-r0: 1/2 ok\n")
    assert text.count("\n") == 1


def test_plain_lines_have_no_control_characters() -> None:
    stream = io.StringIO()
    progress = Progress(stream, live=False)
    progress.start("c1-r0", 3)
    for index in range(3):
        progress.request_done(finished(index))
    progress.note("resuming: 1 point(s) already in x")
    progress.finish("3/3 ok")
    assert stream.getvalue() == "resuming: 1 point(s) already in x\nc1-r0: 3/3 ok\n"


def test_auto_mode_follows_the_stream() -> None:
    assert Progress(io.StringIO()).live is False


def test_state_file_holds_the_point_in_flight_and_the_finished_lines(tmp_path: Path) -> None:
    state_path = tmp_path / "progress.json"
    progress = Progress(io.StringIO(), live=False, state_path=state_path)
    progress.start("c2-r0", 2)
    first = json.loads(state_path.read_text())
    assert (first["label"], first["done"], first["total"], first["finished"]) == ("c2-r0", 0, 2, [])
    progress.request_done(finished(0))
    progress.request_done(finished(1, error="HTTP 500: boom"))
    progress.finish("1/2 ok")
    last = json.loads(state_path.read_text())
    assert (last["done"], last["failed"], last["finished"]) == (2, 1, ["c2-r0: 1/2 ok"])
    assert last["output_tokens_per_s"] > 0
    assert [path.name for path in tmp_path.iterdir()] == ["progress.json"]


def test_state_file_is_rewritten_at_most_once_a_second_between_start_and_finish(tmp_path: Path) -> None:
    state_path = tmp_path / "progress.json"
    progress = Progress(io.StringIO(), live=False, state_path=state_path)
    progress.start("c8-r0", 8)
    for index in range(7):
        progress.request_done(finished(index))
    # Seven requests within a second of the start: the file still shows the start.
    assert json.loads(state_path.read_text())["done"] == 0
