"""SGLang's own command-line parser as the judge of rendered launch arguments.

A campaign's ``sglang_argv`` is only as good as SGLang's parser says: flags get renamed, removed or become
ambiguous prefixes between releases (0.5.23 dropped ``--enable-ep-moe``; ``--cuda-graph-max-bs`` became an
ambiguous prefix of ``--cuda-graph-max-bs-decode``). This module runs ``VENV/bin/python`` - a venv with SGLang
installed (``--no-deps`` plus the few packages ``sglang.srt.server_args`` imports is enough; no GPU) - and
feeds every argv through ``ServerArgs.add_cli_args`` and ``parse_args``, exactly as ``sglang.launch_server``
parses its command line. Nothing is started.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from fairbench.campaign.model import DISAGGREGATION_KEY, Campaign

# Runs inside the SGLang venv: reads {name: argv} as JSON on stdin, writes {name: error or null}.
_PARSE_SCRIPT = r"""
import argparse, contextlib, io, json, sys
from sglang.srt.server_args import ServerArgs

results = {}
for name, argv in json.load(sys.stdin).items():
    parser = argparse.ArgumentParser(prog="sglang.launch_server")
    ServerArgs.add_cli_args(parser)
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            parser.parse_args(argv)
    except SystemExit:
        lines = [line for line in err.getvalue().splitlines() if line.strip()]
        results[name] = lines[-1] if lines else "rejected (no message)"
    else:
        results[name] = None
json.dump(results, sys.stdout)
"""


class SGLangParserError(Exception):
    """The parser itself could not run (no such venv, SGLang not importable, ...)."""


def venv_python(venv: str | Path) -> Path:
    return Path(venv) / "bin" / "python"


def parse_argvs(
    venv: str | Path, argvs: Mapping[str, Sequence[str]], timeout_s: float = 300.0
) -> dict[str, str | None]:
    """Parses each argv with SGLang's parser in ``venv``: per name, None when accepted, else the parser's
    error (e.g. ``sglang.launch_server: error: unrecognized arguments: --enable-ep-moe``)."""
    python = venv_python(venv)
    if not python.exists():
        raise SGLangParserError(f"{venv}: no {python} (a venv with sglang installed is needed)")
    try:
        done = subprocess.run(
            [str(python), "-c", _PARSE_SCRIPT],
            input=json.dumps({name: list(argv) for name, argv in argvs.items()}),
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise SGLangParserError(f"{venv}: SGLang's parser did not answer in {timeout_s:.0f} s") from exc
    if done.returncode != 0:
        tail = "\n".join(done.stderr.strip().splitlines()[-5:])
        raise SGLangParserError(f"{venv}: SGLang's parser failed to run (exit {done.returncode}):\n{tail}")
    try:
        results = json.loads(done.stdout)
    except json.JSONDecodeError as exc:
        raise SGLangParserError(f"{venv}: SGLang's parser printed no result: {done.stdout[-500:]!r}") from exc
    return {name: (None if results.get(name) is None else str(results[name])) for name in argvs}


def campaign_argvs(campaign: Campaign) -> dict[str, list[str]]:
    """Each server's rendered ``sglang.launch_server`` argv (sim-only flags excluded), by the key path it
    comes from: a config's name, or for each server of a disaggregated config its role's
    (``pd.disaggregation.prefill (prefill-0)``), as those are what is launched."""
    argvs: dict[str, list[str]] = {}
    for name, config in campaign.configs.items():
        if config.disaggregation is None:
            argvs[name] = list(config.sglang_argv)
            continue
        for server in config.disaggregation.servers:
            argvs[f"{name}.{DISAGGREGATION_KEY}.{server.role} ({server.name})"] = list(server.sglang_argv)
    return argvs


def check_campaign(venv: str | Path, campaign: Campaign) -> dict[str, str | None]:
    """``parse_argvs`` over every server of ``campaign`` (``campaign_argvs``)."""
    return parse_argvs(venv, campaign_argvs(campaign))
