"""``fairbench run``: a campaign on an inventory's GPU hosts through ansible-runner, with live progress.

It plays what ``ansible-playbook playbooks/site.yml -e campaign=... -e run_id=...`` plays (provision,
campaign, report), and shows per host the config, its stage, the concurrency level in flight and its output
tokens/s (fairbench.cli.run_display). Ansible's full output goes to ``ansible.log`` in the run's directory.
The campaign is checked first, so a bad file fails here with its errors, before any host is touched.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from fairbench.campaign.load import CampaignError, load_campaign
from fairbench.cli.main import UsageError
from fairbench.cli.run_display import RunDisplay

RUN_ID_PATTERN = "^[A-Za-z0-9][A-Za-z0-9_.-]*$"
RESERVED_VARS = {"campaign": "the CAMPAIGN argument", "run_id": "--run-id"}
"""Extra variables ``fairbench run`` sets itself, each from its own argument."""
SITE_PLAYBOOK = Path("playbooks") / "site.yml"
ANSIBLE_LOG = "ansible.log"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("campaign", type=Path, help="the campaign file (campaigns/NAME.yml)")
    parser.add_argument("-i", "--inventory", type=Path, required=True, help="the GPU hosts' inventory")
    parser.add_argument(
        "--run-id", help="the run's name (default: the start time, UTC); an existing run's id resumes it"
    )
    parser.add_argument(
        "--playbook",
        type=Path,
        default=SITE_PLAYBOOK,
        help="relative to the project (default playbooks/site.yml: provision, campaign, report)",
    )
    parser.add_argument(
        "--check", action="store_true", help="show what would change (--check --diff), run nothing"
    )
    parser.add_argument(
        "--limit", help="only these GPU hosts (Ansible's --limit pattern; the control node is always in)"
    )
    parser.add_argument(
        "-e",
        "--extra-var",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an Ansible variable for this run, e.g. -e bench_sweep_poll_s=2 (repeatable)",
    )
    parser.add_argument(
        "--project-dir",
        type=Path,
        help="fairbench's project (playbooks/, roles/, ansible.cfg); default: found from here or the package",
    )
    parser.add_argument(
        "--live",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="a status line redrawn in place (default: when stdout is a terminal)",
    )


def run(args: argparse.Namespace) -> int:
    run_id = _run_id(args.run_id)
    limit = _limit(args.limit)
    given_vars = extra_vars(args.extra_var)
    try:
        import ansible_runner  # type: ignore[import-untyped]  # noqa: PLC0415 - only this command needs it
        from ansible_runner.exceptions import AnsibleRunnerException  # type: ignore[import-untyped]  # noqa: PLC0415
    except ImportError:
        return _runtime_error("ansible-runner is not installed: pip install 'fairbench[control]'")
    project = project_dir(args.project_dir)
    playbook = project / args.playbook
    if not playbook.is_file():
        raise UsageError(f"--playbook: {playbook} does not exist")
    inventory = args.inventory.resolve()
    if not inventory.exists():
        raise UsageError(f"-i/--inventory: {args.inventory} does not exist")
    try:
        campaign = load_campaign(args.campaign)
    except CampaignError as exc:
        for message in exc.messages:
            print(message, file=sys.stderr)
        return 2
    extravars = {
        **given_vars,
        # As named from the project, where ansible-playbook runs: campaign.json records it so.
        "campaign": os.path.relpath(args.campaign.resolve(), project),
        "run_id": run_id,
    }
    display = RunDisplay(sys.stdout, live=sys.stdout.isatty() if args.live is None else args.live)
    print(f"fairbench run: campaign {campaign.name} ({len(campaign.configs)} configs), run id {run_id}")
    with tempfile.TemporaryDirectory(prefix="fairbench-runner-") as private_dir:
        sigint_handler = signal.getsignal(signal.SIGINT)
        try:
            runner: Any = ansible_runner.run(
                private_data_dir=private_dir,
                project_dir=str(project),
                playbook=str(playbook),
                inventory=str(inventory),
                extravars=extravars,
                cmdline="--check --diff" if args.check else None,
                limit=limit,
                envvars={
                    "ANSIBLE_CONFIG": str(project / "ansible.cfg"),
                    "ANSIBLE_NOCOLOR": "1",
                    # ansible-playbook from this Python's venv, even when the venv is not activated.
                    "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}",
                },
                event_handler=display.handle,
                quiet=True,
            )
        except KeyboardInterrupt:
            return _interrupted(run_id)
        except AnsibleRunnerException as exc:
            return _runtime_error(f"ansible-runner: {exc}")
        finally:
            # ansible-runner turns Ctrl-C into a cancellation through a handler it leaves installed.
            signal.signal(signal.SIGINT, sigint_handler)
            display.close()
        # Beside the run's results; before any config started, beside the default results root's.
        run_dir = display.run_dir or project / "results" / campaign.name / run_id
        log = _keep_log(Path(private_dir) / "artifacts" / str(runner.config.ident) / "stdout", run_dir)
    if runner.status == "canceled":
        return _interrupted(run_id)
    for path in display.report_paths:
        print(f"report: {path}")
    if display.failed_configs:
        print(f"failed: {', '.join(display.failed_configs)} (each status.json says why)")
    rc: int = runner.rc
    if rc != 0 and not display.failed_configs:
        where = f"; {log} has its whole output" if log else ""
        print(f"ansible-playbook failed (rc {rc}){where}")
    return rc


def _run_id(given: str | None) -> str:
    if given is None:
        return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    # Checked here too, not only by campaign.yml: site.yml provisions every host before that check.
    if not re.fullmatch(RUN_ID_PATTERN, given):
        raise UsageError(
            f"--run-id: {given!r} must be letters, digits, '_', '.' and '-', starting with a letter or digit"
        )
    return given


def _limit(given: str | None) -> str | None:
    if given is None:
        return None
    if not given.strip():
        raise UsageError("--limit: an empty pattern; leave the option out to run on every host")
    # The campaign's own plays (load, record, report) run on the control node: a limit to some GPU hosts
    # must not leave it out.
    return f"{given},localhost"


def _keep_log(stdout: Path, run_dir: Path) -> Path | None:
    """ansible-playbook's output copied to the run's ``ansible.log``; None, said why, if it cannot be."""
    log = run_dir / ANSIBLE_LOG
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(stdout, log)
    except OSError as exc:
        print(
            f"fairbench run: error: cannot keep ansible's output as {log}: {exc.strerror or exc}",
            file=sys.stderr,
        )
        return None
    print(f"ansible's output: {log}")
    return log


def _interrupted(run_id: str) -> int:
    print(f"interrupted: sweeps already started go on on their hosts; --run-id {run_id} resumes")
    return 130


def _runtime_error(message: str) -> int:
    print(f"fairbench run: error: {message}", file=sys.stderr)
    return 1


def project_dir(given: Path | None) -> Path:
    """fairbench's project: the given one, else the first of the current directory, its parents and the
    source tree this package was imported from that holds playbooks/site.yml."""
    if given is not None:
        if not (given / SITE_PLAYBOOK).is_file():
            raise UsageError(f"--project-dir: {given} has no {SITE_PLAYBOOK}")
        return given.resolve()
    here = Path.cwd().resolve()
    for candidate in (here, *here.parents, Path(__file__).resolve().parents[3]):
        if (candidate / SITE_PLAYBOOK).is_file():
            return candidate
    raise UsageError(
        f"no {SITE_PLAYBOOK} in {here} or its parents: run from fairbench's project or --project-dir"
    )


def extra_vars(pairs: list[str]) -> dict[str, str]:
    """``-e KEY=VALUE`` options as Ansible extra variables."""
    parsed: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.isidentifier():
            raise UsageError(f"-e/--extra-var: {pair!r} is not KEY=VALUE with KEY a variable name")
        if key in RESERVED_VARS:
            raise UsageError(f"-e/--extra-var: {key} is set by {RESERVED_VARS[key]}")
        parsed[key] = value
    return parsed
