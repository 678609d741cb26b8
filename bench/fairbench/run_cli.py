"""``fairbench run``: a campaign on an inventory's GPU hosts through ansible-runner, with live progress.

It plays what ``ansible-playbook playbooks/site.yml -e campaign=... -e run_id=...`` plays (provision,
campaign, report), and shows per host the config, its stage, the concurrency level in flight and its output
tokens/s (fairbench.run_display). Ansible's full output goes to ``ansible.log`` in the run's directory.
The campaign is checked first, so a bad file fails here with its errors, before any host is touched.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from fairbench.campaign import CampaignError, load_campaign
from fairbench.cli import UsageError
from fairbench.run_display import RunDisplay

RUN_ID_PATTERN = "^[A-Za-z0-9][A-Za-z0-9_.-]*$"
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
    try:
        import ansible_runner  # type: ignore[import-untyped]  # noqa: PLC0415 - only this command needs it
    except ImportError as exc:
        raise UsageError(
            f"ansible-runner is not installed: pip install 'fairbench[control]' ({exc})"
        ) from exc
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
    run_id = args.run_id or datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    extravars = {
        **extra_vars(args.extra_var),
        # As named from the project, where ansible-playbook runs: campaign.json records it so.
        "campaign": os.path.relpath(args.campaign.resolve(), project),
        "run_id": run_id,
    }
    display = RunDisplay(sys.stdout, live=sys.stdout.isatty() if args.live is None else args.live)
    print(f"fairbench run: campaign {campaign.name} ({len(campaign.configs)} configs), run id {run_id}")
    with tempfile.TemporaryDirectory(prefix="fairbench-runner-") as private_dir:
        try:
            runner: Any = ansible_runner.run(
                private_data_dir=private_dir,
                project_dir=str(project),
                playbook=str(playbook),
                inventory=str(inventory),
                extravars=extravars,
                cmdline="--check --diff" if args.check else None,
                # The campaign's own plays (load, record, report) run on the control node: a limit to
                # some GPU hosts must not leave it out.
                limit=f"{args.limit},localhost" if args.limit else None,
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
            print(f"interrupted: sweeps already started go on on their hosts; --run-id {run_id} resumes")
            return 130
        finally:
            display.close()
        # Beside the run's results; before any config started, beside the default results root's.
        run_dir = display.run_dir or project / "results" / campaign.name / run_id
        log = run_dir / ANSIBLE_LOG
        run_dir.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(Path(private_dir) / "artifacts" / str(runner.config.ident) / "stdout", log)
        print(f"ansible's output: {log}")
    for path in display.report_paths:
        print(f"report: {path}")
    if display.failed_configs:
        print(f"failed: {', '.join(display.failed_configs)} (each status.json says why)")
    rc: int = runner.rc
    if rc != 0 and not display.failed_configs:
        print(f"ansible-playbook failed (rc {rc}); {log} has its whole output")
    return rc


def project_dir(given: Path | None) -> Path:
    """fairbench's project: the given one, else the first of the current directory, its parents and the
    source tree this package was imported from that holds playbooks/site.yml."""
    if given is not None:
        if not (given / SITE_PLAYBOOK).is_file():
            raise UsageError(f"--project-dir: {given} has no {SITE_PLAYBOOK}")
        return given.resolve()
    here = Path.cwd().resolve()
    for candidate in (here, *here.parents, Path(__file__).resolve().parents[2]):
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
        parsed[key] = value
    return parsed
