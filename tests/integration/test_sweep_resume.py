"""A sweep killed with SIGKILL and resumed: what it wrote stays as it was, and only the rest is measured.

The test server records every request it received (its ``rid`` names the sweep, the point, the phase
and the prompt's index; its prompt's token count); prompts of varied length (``--range-ratio``) make
those records differ from point to point, so a resume that re-sends a point, or sends other prompts
than an uninterrupted sweep would have, shows in them.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from tests.support.sse_server import StartServer
from tests.support.sweep_process import points, run_sweep, sweep_args

SWEEP = (
    *("--input-len", "64", "--output-len", "12", "--range-ratio", "0.25"),
    *("--concurrency", "1,2,4,8", "--warmup", "1x", "--repeats", "2"),
)
POINTS = 8  # 4 levels x 2 repeats
RID = re.compile(
    r"fairbench-(?P<run>[0-9a-f]+)-(?P<point>c\d+-r\d+)-(?P<phase>warmup|measure)-(?P<index>\d+)"
)
Received = dict[str, list[tuple[str, int, int, int]]]


def received_by_point(records: list[dict[str, Any]]) -> Received:
    """Each point's requests as the server received them: (phase, prompt index, prompt tokens, output
    tokens), in prompt order."""
    by_point: defaultdict[str, list[tuple[str, int, int, int]]] = defaultdict(list)
    for record in records:
        match = RID.fullmatch(record["id"])
        assert match, record["id"]
        by_point[match["point"]].append(
            (match["phase"], int(match["index"]), record["prompt_tokens"], record["output_tokens"])
        )
    return {point: sorted(requests) for point, requests in by_point.items()}


def complete_lines(path: Path) -> bytes:
    """The file's bytes up to its last line end: what a kill left whole."""
    data = path.read_bytes()
    return data[: data.rfind(b"\n") + 1]


def test_a_killed_sweep_resumes_with_its_points_untouched_and_measures_only_the_rest(
    sse_server: StartServer, tmp_path: Path
) -> None:
    server = sse_server(chunk_gap_ms=2)
    reference = tmp_path / "reference"
    assert run_sweep(server.url, reference, *SWEEP).returncode == 0
    uninterrupted = received_by_point(server.send_times(clear=True))
    assert len(uninterrupted) == POINTS
    prompt_lengths = {tokens for requests in uninterrupted.values() for _, _, tokens, _ in requests}
    assert len(prompt_lengths) > 5, prompt_lengths  # the lengths vary, so equal records mean equal prompts

    out = tmp_path / "killed"
    process = subprocess.Popen(
        sweep_args(server.url, out, *SWEEP), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    points_file = out / "points.jsonl"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (
        points_file.exists() and points_file.read_text().count("\n") >= 3
    ):
        time.sleep(0.005)
    process.kill()  # SIGKILL: no cleanup of any kind runs
    process.wait()
    before = complete_lines(points_file)
    written = [json.loads(line)["point_id"] for line in before.decode().splitlines()]
    assert 3 <= len(written) < POINTS
    request_files = {pid: (out / "requests" / f"{pid}.jsonl.gz").read_bytes() for pid in written}
    killed_run = received_by_point(server.send_times(clear=True))
    assert set(written) <= set(killed_run)

    resumed = run_sweep(server.url, out, *SWEEP, "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert f"resuming: {len(written)} point(s) already in" in resumed.stderr

    # What the killed run wrote is still there, byte for byte, ahead of the rest.
    assert points_file.read_bytes().startswith(before)
    for pid, data in request_files.items():
        assert (out / "requests" / f"{pid}.jsonl.gz").read_bytes() == data, pid
    final = [point["point_id"] for point in points(out)]
    assert final[: len(written)] == written
    assert sorted(final) == sorted(uninterrupted)
    # The server received the remaining points only, each with the prompts an uninterrupted sweep sent.
    remaining = sorted(set(uninterrupted) - set(written))
    after_resume = received_by_point(server.send_times())
    assert sorted(after_resume) == remaining
    for pid in remaining:
        assert after_resume[pid] == uninterrupted[pid], pid
    assert not list((out / "requests").glob("*.tmp"))
