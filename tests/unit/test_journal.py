"""A failed server's journal excerpt: its last traceback, ending with the exception, else its last lines."""

from __future__ import annotations

from pathlib import Path

from fairbench.measure.journal import excerpt

PREFIX = "2026-12-01T09:16:38+0000 lab1 python[3417]: "


def _journal(*messages: str) -> list[str]:
    return [PREFIX + message for message in messages]


# The shape of a real SGLang crash: the traceback inside a log line, deep frames, then the shutdown's noise.
CRASH = [
    *_journal(
        "[2026-12-01 09:16:53] server_args={'model_path': ...}",
        "[2026-12-01 09:43:29] Scheduler hit an exception: Traceback (most recent call last):",
        '  File "/opt/sglang/venv/lib/python3.11/site-packages/sglang/srt/managers/scheduler.py", line 6368',
        "    scheduler.run_event_loop()",
        '  File "/opt/sglang/venv/lib/python3.11/site-packages/torch/nn/functional.py", line 2551',
        "    return torch.embedding(weight, input, padding_idx, scale_grad_by_freq, sparse)",
        "           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
        "IndexError: index out of range in self",
        "",
        "[2026-12-01 09:43:29] SIGQUIT received. signum=None, frame=None. It usually means one child failed.",
        "[2026-12-01 09:43:29] Sleeping 5 seconds before crash diagnostics to let GPU activity settle.",
        "[2026-12-01 09:43:34] kill_process_tree called: parent_pid=3815, include_parent=True, pid=3815",
    ),
    "2026-12-01T09:43:35+0000 lab1 systemd[1]: fairbench-x.service: Failed with result 'signal'.",
]


def test_a_crash_quotes_its_traceback_through_the_exception_not_the_shutdown_after_it() -> None:
    quoted = excerpt(CRASH, 30)
    assert quoted == CRASH[1:8]
    assert quoted[-1].endswith("IndexError: index out of range in self")


def test_a_traceback_longer_than_the_limit_keeps_its_header_and_innermost_frames() -> None:
    quoted = excerpt(CRASH, 4)
    assert quoted == [CRASH[1], *CRASH[5:8]]


def test_the_last_of_several_tracebacks_is_quoted() -> None:
    journal = _journal("Traceback (most recent call last):", '  File "a.py", line 1', "ValueError: first")
    journal += _journal("Traceback (most recent call last):", '  File "b.py", line 2', "KeyError: 'second'")
    assert excerpt(journal, 30) == journal[3:]


def test_without_a_complete_traceback_the_last_lines_are_quoted() -> None:
    plain = _journal(*(f"line {n}" for n in range(50)))
    assert excerpt(plain, 30) == plain[-30:]
    cut_short = _journal("ok", "Traceback (most recent call last):", '  File "a.py", line 1')
    assert excerpt(cut_short, 2) == cut_short[-2:]
    assert excerpt(plain, 0) == []


def test_lines_without_a_journal_prefix_are_read_as_they_are() -> None:
    raw = ["starting", "Traceback (most recent call last):", '  File "x.py", line 3', "OSError: gone", "bye"]
    assert excerpt(raw, 30) == raw[1:4]


def test_a_real_sglang_crash_is_quoted_from_its_traceback_to_the_index_error() -> None:
    """journal.log of tests/lab/test_sglang_lab.py's crashing config: its shutdown follows the error."""
    journal = (Path(__file__).parents[1] / "fixtures" / "journal" / "sglang-vocab-256.log").read_text()
    lines = journal.splitlines()
    quoted = excerpt(lines, 30)
    assert len(quoted) == 30
    assert quoted[0].endswith("Scheduler hit an exception: Traceback (most recent call last):")
    assert quoted[-1].endswith("IndexError: index out of range in self")
    assert not any("SIGQUIT" in line or "systemd[1]" in line for line in quoted)
    # The last 30 lines would have begun inside the traceback, without its header, and with the shutdown.
    assert not any("Traceback" in line for line in lines[-30:])
