"""ansible-playbook's own options as ``fairbench run`` takes them: spelled as ansible-playbook spells them and
handed on to it as given, bar file paths, made absolute (ansible-playbook runs in the project directory).

They are mirrored one by one rather than passed on verbatim after ``--``: fairbench has to see the ones that
prompt (ansible-runner gives ansible-playbook no terminal, so fairbench asks instead: run_prompts) and the
extra variables (run_extra_vars), and an option it has not mirrored is refused by name instead of reaching
ansible-playbook unseen (``--step`` would wait for an answer nobody can give).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

VAULT_PROMPT_SOURCES = ("prompt", "prompt_ask_vault_pass")
"""``--vault-id LABEL@SOURCE`` sources that are not files: ansible-playbook prompts for them."""


@dataclass(frozen=True)
class PassedOption:
    """One ansible-playbook option, taken as ansible-playbook takes it."""

    names: tuple[str, ...]
    """ansible-playbook's spellings; the first long one is what ansible-playbook is given."""
    help: str
    metavar: str = ""
    """The value's name; a flag has none."""
    value: Literal["text", "path", "vault_id"] = "text"
    repeat: bool = False
    reads_vars: bool = False
    """Needed to read the variables too (vault): run_dir asks Ansible for the run's directory with it."""

    @property
    def long_name(self) -> str:
        return next(name for name in self.names if name.startswith("--"))

    @property
    def dest(self) -> str:
        return "ansible_" + self.long_name[2:].replace("-", "_")


OPTIONS: tuple[PassedOption, ...] = (
    PassedOption(("-t", "--tags"), "only the plays and tasks tagged with these", "TAGS", repeat=True),
    PassedOption(("--skip-tags",), "only the plays and tasks not tagged with these", "TAGS", repeat=True),
    PassedOption(("-C", "--check"), "change nothing; show what would change (with -D, how)"),
    PassedOption(("-D", "--diff"), "show the differences in the files and templates changed"),
    PassedOption(("-f", "--forks"), "parallel processes (default: ansible.cfg's forks)", "FORKS"),
    PassedOption(("-u", "--user"), "connect as this user", "REMOTE_USER"),
    PassedOption(
        ("--private-key", "--key-file"), "authenticate the connection with this key", "FILE", value="path"
    ),
    PassedOption(("-c", "--connection"), "the connection type", "CONNECTION"),
    PassedOption(("-T", "--timeout"), "the connection timeout in seconds", "TIMEOUT"),
    PassedOption(("--ssh-common-args",), "arguments for sftp, scp and ssh (e.g. ProxyCommand)", "ARGS"),
    PassedOption(("--ssh-extra-args",), "arguments for ssh only (e.g. -R)", "ARGS"),
    PassedOption(("-k", "--ask-pass"), "ask for the connection password"),
    PassedOption(
        ("--connection-password-file", "--conn-pass-file"),
        "the connection password's file",
        "FILE",
        value="path",
    ),
    PassedOption(("-b", "--become"), "run operations with become"),
    PassedOption(("--become-method",), "the privilege escalation method (default sudo)", "METHOD"),
    PassedOption(("--become-user",), "become this user (default root)", "USER"),
    PassedOption(("-K", "--ask-become-pass"), "ask for the privilege escalation password"),
    PassedOption(
        ("--become-password-file", "--become-pass-file"),
        "the privilege escalation password's file",
        "FILE",
        value="path",
    ),
    PassedOption(
        ("-J", "--ask-vault-pass", "--ask-vault-password"), "ask for the vault password", reads_vars=True
    ),
    PassedOption(
        ("--vault-password-file", "--vault-pass-file"),
        "the vault password's file (or script)",
        "FILE",
        value="path",
        repeat=True,
        reads_vars=True,
    ),
    PassedOption(
        ("--vault-id",),
        "a vault identity: LABEL@FILE, or LABEL@prompt to be asked",
        "VAULT_ID",
        value="vault_id",
        repeat=True,
        reads_vars=True,
    ),
)


def configure(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "ansible-playbook's options",
        "taken as ansible-playbook takes them and handed on to it (see ansible-playbook --help)",
    )
    group.add_argument(
        "-v",
        "--verbose",
        dest="ansible_verbose",
        action="count",
        default=0,
        help="Ansible's verbosity (-vvv for connection details); its output is in ansible.log",
    )
    for option in OPTIONS:
        if option.metavar:
            group.add_argument(
                *option.names,
                dest=option.dest,
                metavar=option.metavar,
                action="append" if option.repeat else "store",
                help=option.help + (" (repeatable)" if option.repeat else ""),
            )
        else:
            group.add_argument(*option.names, dest=option.dest, action="store_true", help=option.help)


def playbook_args(args: argparse.Namespace) -> list[str]:
    """The mirrored options given, as ansible-playbook's arguments."""
    verbosity = ["-" + "v" * args.ansible_verbose] if args.ansible_verbose else []
    return verbosity + _args(args, OPTIONS)


def vars_args(args: argparse.Namespace) -> list[str]:
    """The options given that reading the variables needs (vault), as arguments of ansible too."""
    return _args(args, tuple(option for option in OPTIONS if option.reads_vars))


def _args(args: argparse.Namespace, options: tuple[PassedOption, ...]) -> list[str]:
    passed: list[str] = []
    for option in options:
        given = getattr(args, option.dest)
        if not option.metavar:
            passed += [option.long_name] if given else []
            continue
        values: list[str] = given if option.repeat else ([] if given is None else [given])
        # NAME=VALUE: a value that starts with '-' (ssh arguments) stays a value.
        passed += [f"{option.long_name}={_value(option, value)}" for value in values or []]
    return passed


def _value(option: PassedOption, value: str) -> str:
    if option.value == "path":
        return str(Path(value).expanduser().absolute())
    if option.value == "vault_id":
        label, source = vault_id_parts(value)
        if source not in VAULT_PROMPT_SOURCES:
            return ("" if label is None else f"{label}@") + str(Path(source).expanduser().absolute())
    return value


def vault_id_parts(vault_id: str) -> tuple[str | None, str]:
    """``LABEL@SOURCE`` or ``SOURCE``, split as ansible-playbook splits it (at the first ``@``)."""
    if "@" not in vault_id:
        return None, vault_id
    label, source = vault_id.split("@", 1)
    return label, source
