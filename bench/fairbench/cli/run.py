"""``fairbench run``: a campaign on an inventory's GPU hosts through ansible-runner, with live progress.

It plays what ``ansible-playbook playbooks/site.yml -e campaign=... -e run_id=...`` plays (provision,
campaign, report), and shows per host the config, its stage, the concurrency level in flight and its output
tokens/s (fairbench.cli.run_display). Ansible writes its whole output, as it runs, to ``ansible.log`` in the
run's directory (ANSIBLE_LOG_PATH), which Ansible itself names first (fairbench.cli.run_dir).
The campaign is checked first, so a bad file fails here with its errors, before any host is touched.
ansible-playbook's own options are taken as it takes them (fairbench.cli.run_options, run_extra_vars) and
its prompts asked here (fairbench.cli.run_prompts).
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from fairbench.campaign.findings import CampaignError
from fairbench.campaign.load import load_campaign
from fairbench.campaign.model import Campaign
from fairbench.cli import run_dir, run_extra_vars, run_options
from fairbench.cli.campaign_plan import campaign_forecast, history_dir, plan_lines, summary_line
from fairbench.cli.inventory_hosts import InventoryError, read_inventory
from fairbench.cli.run_display import RunDisplay
from fairbench.cli.run_eta import RunEta
from fairbench.cli.run_prompts import ask_secrets
from fairbench.cli.usage import UsageError
from fairbench.fleet.campaign_record import ResumeRefused, check_resume
from fairbench.fleet.estimate import EstimateError
from fairbench.fleet.forecast import Forecast, write_forecast
from fairbench.fleet.plan import PlanError
from fairbench.measure.results import new_run_id, run_id_problem

ALLOW_CHANGED = "--allow-changed-campaign"
RESUME_CHANGED_VAR = "bench_resume_changed"
"""The bench role's variable ALLOW_CHANGED sets."""
RESERVED_VARS = {"campaign": "the CAMPAIGN argument", "run_id": "--run-id", RESUME_CHANGED_VAR: ALLOW_CHANGED}
"""Extra variables ``fairbench run`` sets itself, each from its own argument."""
SITE_PLAYBOOK = Path("playbooks") / "site.yml"
ANSIBLE_LOG = "ansible.log"
CANCEL_CHECK_S = 0.5
DESCRIPTION = (
    "Run a campaign on an inventory's GPU hosts, as ansible-playbook playbooks/site.yml does: provision the "
    "hosts, deploy each config as its own systemd unit, sweep each on a clean host, fetch the results and "
    "write the report. The campaign file is checked first, before any host is touched. It shows each job as "
    "a host starts it, each concurrency level as it completes (its tokens/s, and whether it met the SLO) and "
    "each failure with its journal excerpt, and ends by printing the report's path. The run's directory "
    "(results/CAMPAIGN/RUN_ID by default) holds the report, every config's results and ansible.log. It "
    "starts with the campaign's plan in one line (its jobs, GPU-hours and wall time at the least and at the "
    "most, kept as plan.json in the run's directory) and shows an ETA as jobs end; --plan prints the whole "
    "plan and runs nothing. The exit status is ansible-playbook's."
)
EPILOG = """\
examples:
  fairbench run campaigns/demo.yml -i inventory/lab.yml
  fairbench run campaigns/kimi-k2.6-pcie.yml -i inventory/my-hosts.yml --run-id first -C -D
  fairbench run campaigns/kimi-k2.6-pcie.yml -i inventory/my-hosts.yml --run-id first
  fairbench run campaigns/kimi-k2.6-pcie.yml -i inventory/my-hosts.yml --plan

The second prints what would change and which host would take which job, changing nothing (-C -D); the
third runs it, and run again, resumes it; the fourth prints what it will cost and runs nothing. The plan
learns the servers' start and the points' times from the newest earlier run of the campaign beside the
run's directory (or --from RUN_DIR; --fresh: none), else from the campaign's expected_start_s and, with
engine sim, the simulator's model (docs/metrics.md has its formulas).

ansible-playbook's options above are spelled as ansible-playbook spells them and handed on to it, one by
one rather than everything after --, because ansible-playbook runs here without a terminal: fairbench asks
for the -K, -k, -J and --vault-id LABEL@prompt passwords itself and answers ansible-playbook's prompts
with them, and it refuses an option it does not list, by name, rather than leave it to hang (for those,
e.g. --step or --start-at-task, run ansible-playbook itself). -i, --limit (the control node is always
added) and the variables campaign and run_id are fairbench's own: an -e that sets campaign or run_id (as
KEY=VALUE, a mapping or a readable @FILE) is refused, as is one that sets bench_resume_changed
(--allow-changed-campaign sets it), and fairbench's values come last, so an encrypted @FILE cannot override
them either.

Ansible's whole output goes to ansible.log in the run's directory as it runs (tail -f it; a resumed run
appends). That directory is the bench role's bench_run_dir (bench_results_root/CAMPAIGN/RUN_ID), which
fairbench asks Ansible for first, with this run's inventory, -e and vault options. Ctrl-C stops
ansible-playbook: the log keeps what ran, and the sweeps already started go on on their hosts; the same
--run-id resumes them. A resume whose campaign differs from the one the run recorded (campaign.json in its
directory) is refused before ansible-playbook starts, naming what differs, unless --allow-changed-campaign.
More in docs/running.md.
"""


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = DESCRIPTION
    parser.epilog = EPILOG
    parser.add_argument("campaign", type=Path, help="the campaign file, e.g. campaigns/demo.yml")
    parser.add_argument(
        "-i",
        "--inventory",
        action="append",
        required=True,
        help="the GPU hosts' inventory (repeatable, as for ansible-playbook)",
    )
    parser.add_argument(
        "--run-id", help="the run's name (default: the start time, UTC); an existing run's id resumes it"
    )
    parser.add_argument(
        ALLOW_CHANGED,
        action="store_true",
        help="resume --run-id though the campaign differs from the one the run recorded (that one is kept "
        "as campaign.<n>.json, and the report says the campaign changed); by default such a resume is "
        "refused before any host is touched",
    )
    parser.add_argument(
        "--playbook",
        type=Path,
        default=SITE_PLAYBOOK,
        help="the playbook, relative to the project (default %(default)s: provision, campaign, report; "
        "playbooks/campaign.yml skips provisioning and the report)",
    )
    parser.add_argument(
        "-l",
        "--limit",
        help="only these GPU hosts (Ansible's --limit pattern; the control node is always in)",
    )
    parser.add_argument(
        "-e",
        "--extra-vars",
        "--extra-var",
        dest="extra_var",
        action="append",
        default=[],
        metavar="VARS",
        help="extra variables as ansible-playbook takes them: KEY=VALUE (several, space-separated), @FILE "
        "(YAML or JSON) or a YAML/JSON mapping, e.g. -e bench_sweep_poll_s=2 (repeatable; the last wins)",
    )
    parser.add_argument(
        "--project-dir",
        type=Path,
        help="fairbench's project (playbooks/, roles/, ansible.cfg); default: found from here or the package",
    )
    parser.add_argument(
        "--plan",
        action="store_true",
        help="print the campaign's plan on the inventory's hosts (jobs, levels, repeats, points, requests, "
        "GPU-hours, wall time; at the least and at the most) and exit, running nothing",
    )
    parser.add_argument(
        "--from",
        dest="earlier_run",
        type=Path,
        metavar="RUN_DIR",
        help="learn the plan's times from this run of the campaign (default: the newest beside this run)",
    )
    parser.add_argument("--fresh", action="store_true", help="learn the plan's times from no earlier run")
    parser.add_argument(
        "--live",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="redraw one status line in place (default: when standard output is a terminal)",
    )
    run_options.configure(parser)


def run(args: argparse.Namespace) -> int:
    run_id = _run_id(args.run_id)
    limit = _limit(args.limit)
    try:
        import ansible_runner  # type: ignore[import-untyped]  # noqa: PLC0415 - only this command needs it
        from ansible_runner.exceptions import AnsibleRunnerException  # type: ignore[import-untyped]  # noqa: PLC0415
    except ImportError:
        return _runtime_error("ansible-runner is not installed: pip install 'fairbench[control]'")
    extra_var_args = run_extra_vars.passed_on(args.extra_var, RESERVED_VARS)
    project = project_dir(args.project_dir)
    playbook = project / args.playbook
    if not playbook.is_file():
        raise UsageError(f"--playbook: {playbook} does not exist")
    inventories = _inventories(args.inventory)
    try:
        campaign = load_campaign(args.campaign)
    except CampaignError as exc:
        for message in exc.messages:
            print(message, file=sys.stderr)
        return 2
    passwords = ask_secrets(args)
    extravars = {
        # As named from the project, where ansible-playbook runs: campaign.json records it so.
        "campaign": os.path.relpath(args.campaign.resolve(), project),
        "run_id": run_id,
        # The play checks the resume as this run does below, by this flag alone.
        RESUME_CHANGED_VAR: args.allow_changed_campaign,
    }
    display = RunDisplay(sys.stdout, live=sys.stdout.isatty() if args.live is None else args.live)
    print(f"fairbench run: campaign {campaign.name} ({len(campaign.configs)} configs), run id {run_id}")
    with tempfile.TemporaryDirectory(prefix="fairbench-runner-") as private_dir:
        runner_options = _runner_options(private_dir, project, passwords)
        try:
            with _signals_kept():
                where = run_dir.resolve(
                    project=project,
                    playbook=playbook,
                    campaign_name=campaign.name,
                    run_id=run_id,
                    inventories=inventories,
                    ansible_args=[*extra_var_args, *run_options.vars_args(args)],
                    runner_options=runner_options,
                )
        except KeyboardInterrupt:
            print("interrupted before ansible-playbook started")
            return 130
        except run_dir.RunDirError as exc:
            return _runtime_error(str(exc))
        except AnsibleRunnerException as exc:
            return _runtime_error(f"ansible-runner: {exc}")
        plan = _plan(campaign, args, inventories, where)
        if args.plan:
            if plan is None:
                return 1
            print("\n".join(plan_lines(plan)))
            return 0
        if plan is not None:
            print(summary_line(plan))
        try:
            check_resume(
                where, campaign.to_json(), allow_changed=args.allow_changed_campaign, allowed_by=ALLOW_CHANGED
            )
        except ResumeRefused as exc:
            print(f"fairbench run: error: {exc}", file=sys.stderr)
            return 2
        log = _log_in(where)
        # Check mode writes no queue: no plan to set against it, nor an ETA.
        if plan is not None and log is not None and not args.ansible_check:
            display.eta = _kept(plan, where)
        if log is not None:
            print(f"ansible's output, as it runs: {log}")
            envvars = {**runner_options["envvars"], "ANSIBLE_LOG_PATH": str(log)}
            runner_options = {**runner_options, "envvars": envvars}
        try:
            with _signals_kept():
                runner: Any = ansible_runner.run(
                    **runner_options,
                    project_dir=str(project),
                    playbook=str(playbook),
                    inventory=inventories,
                    # After the options given: fairbench's own extra variables win over any -e.
                    extravars=extravars,
                    cmdline=shlex.join([*run_options.playbook_args(args), *extra_var_args]) or None,
                    limit=limit,
                    event_handler=display.handle,
                    quiet=True,
                )
        except KeyboardInterrupt:
            return _interrupted(run_id, log)
        except AnsibleRunnerException as exc:
            return _runtime_error(f"ansible-runner: {exc}")
        finally:
            display.close()
    if runner.status == "canceled":
        return _interrupted(run_id, log)
    _say_log(log)
    for path in display.report_paths:
        print(f"report: {path}")
    if display.failed_configs:
        print(f"failed: {', '.join(display.failed_configs)} (each status.json says why)")
    rc: int = runner.rc
    if rc != 0 and not display.failed_configs:
        where_said = f"; {log} has its whole output" if log else ""
        print(f"ansible-playbook failed (rc {rc}){where_said}")
    return rc


def _plan(
    campaign: Campaign, args: argparse.Namespace, inventories: list[str], where: Path
) -> Forecast | None:
    """The campaign's plan on the inventory's hosts, learning from the newest run beside ``where`` (or the
    one --from names); None, said why, where it cannot be made: a run goes on without it."""
    if args.fresh and args.earlier_run is not None:
        raise UsageError("--fresh: learns from no earlier run, and --from names one")
    earlier = history_dir(campaign, args.earlier_run, results=where.parent, fresh=args.fresh)
    try:
        hosts = read_inventory(inventories, args.limit)
        return campaign_forecast(
            campaign, hosts, inventory_name=", ".join(args.inventory), history_dir=earlier
        )
    except (InventoryError, PlanError, EstimateError) as exc:
        print(f"fairbench run: {'error' if args.plan else 'no plan'}: {exc}", file=sys.stderr)
        return None


def _kept(plan: Forecast, where: Path) -> RunEta | None:
    """The plan written into the run's directory, for the report (plan.json), and its ETA; None, said why,
    where it cannot be written."""
    try:
        write_forecast(where, plan)
    except OSError as exc:
        print(f"fairbench run: the plan not kept in {where}: {exc.strerror or exc}", file=sys.stderr)
        return None
    return RunEta(plan, where)


def _runner_options(private_dir: str, project: Path, passwords: dict[str, str]) -> dict[str, Any]:
    """ansible_runner.run's options for both runs: the one asking for the run's directory, and the play."""
    return {
        "private_data_dir": private_dir,
        "envvars": {
            "ANSIBLE_CONFIG": str(project / "ansible.cfg"),
            "ANSIBLE_NOCOLOR": "1",
            # ansible-playbook from this Python's venv, even when the venv is not activated.
            "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}",
        },
        "passwords": passwords,
        # Nothing written to private_data_dir/env (passwords included): each run takes its own values.
        "suppress_env_files": True,
        # How often ansible-runner looks for a Ctrl-C while ansible-playbook runs (its default: 5 s).
        "settings": {"pexpect_timeout": CANCEL_CHECK_S},
    }


@contextmanager
def _signals_kept() -> Iterator[None]:
    """Ctrl-C and SIGTERM as they were, after ansible-runner: it turns both into a cancellation through
    handlers it leaves installed."""
    kept = {number: signal.getsignal(number) for number in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for number, handler in kept.items():
            signal.signal(number, handler)


def _inventories(given: list[str]) -> list[str]:
    """The -i sources as ansible-playbook, which runs in the project, finds them: paths made absolute."""
    sources: list[str] = []
    for source in given:
        path = Path(source).expanduser()
        if path.exists():
            sources.append(str(path.resolve()))
        elif "," in source:
            sources.append(source)  # a host list, e.g. -i gpu1,gpu2,
        else:
            raise UsageError(f"-i/--inventory: {source} does not exist")
    return sources


def _run_id(given: str | None) -> str:
    if given is None:
        return new_run_id()
    # Checked here too, not only by the campaign playbook: site.yml provisions every host before that.
    problem = run_id_problem(given)
    if problem:
        raise UsageError(f"--run-id: {problem}")
    return given


def _limit(given: str | None) -> str | None:
    if given is None:
        return None
    if not given.strip():
        raise UsageError("--limit: an empty pattern; leave the option out to run on every host")
    # The campaign's own plays (load, record, report) run on the control node: a limit to some GPU hosts
    # must not leave it out.
    return f"{given},localhost"


def _log_in(where: Path) -> Path | None:
    """The run's ``ansible.log``, its directory made for Ansible to write it in; None, said why, if it
    cannot be (the run goes on without it)."""
    log = where / ANSIBLE_LOG
    try:
        where.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        print(
            f"fairbench run: error: cannot keep ansible's output as {log}: {exc.strerror or exc}",
            file=sys.stderr,
        )
        return None
    return log


def _say_log(log: Path | None) -> None:
    if log is not None and log.exists():
        print(f"ansible's output: {log}")


def _interrupted(run_id: str, log: Path | None) -> int:
    _say_log(log)
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
