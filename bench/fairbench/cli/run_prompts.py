"""The secrets ansible-playbook would prompt for (-k, -K, -J, --vault-id LABEL@prompt), asked by fairbench.

ansible-runner runs ansible-playbook on a pseudo-terminal of its own, so ansible-playbook's prompts never
reach the user. fairbench asks first, in ansible-playbook's words, and ansible-runner answers each of
ansible-playbook's prompts with its secret (its ``passwords``: a pattern of the prompt, and the answer).
The secrets stay in this process's memory and go to ansible-playbook through its terminal only.
"""

from __future__ import annotations

import argparse
import getpass
import re

from fairbench.cli.run_options import vault_id_parts
from fairbench.cli.usage import UsageError

SSH_PROMPT = r"^SSH password:\s*?$"
BECOME_PROMPT = r"^(?!SSH )[A-Z]+ password(\[defaults to SSH password\])?:\s*?$"
"""BECOME, or the become method's name where ansible.cfg turns agnostic_become_prompt off."""
VAULT_PROMPT = r"^Vault password:\s*?$"
DEFAULT_VAULT_LABEL = "default"
"""The label ansible-playbook names a ``--vault-id @prompt`` by."""


def ask_secrets(args: argparse.Namespace) -> dict[str, str]:
    """ansible-runner's ``passwords`` for the prompts these options make ansible-playbook show, each asked
    here first."""
    answers: dict[str, str] = {}
    ssh_password = None
    if args.ansible_ask_pass:
        ssh_password = _ask("SSH password: ", "-k/--ask-pass")
        answers[SSH_PROMPT] = ssh_password
    if args.ansible_ask_become_pass:
        if ssh_password is None:
            answers[BECOME_PROMPT] = _ask("BECOME password: ", "-K/--ask-become-pass")
        else:
            given = _ask("BECOME password[defaults to SSH password]: ", "-K/--ask-become-pass")
            answers[BECOME_PROMPT] = given or ssh_password
    if args.ansible_ask_vault_pass:
        answers[VAULT_PROMPT] = _ask("Vault password: ", "-J/--ask-vault-pass")
    for vault_id in args.ansible_vault_id or []:
        label, source = vault_id_parts(vault_id)
        if source == "prompt_ask_vault_pass":
            answers[VAULT_PROMPT] = _ask("Vault password: ", "--vault-id")
        elif source == "prompt":
            label = label or DEFAULT_VAULT_LABEL
            prompt = f"Vault password ({label}): "
            answers[f"^{re.escape(prompt.rstrip())}\\s*?$"] = _ask(prompt, "--vault-id")
    return answers


def _ask(prompt: str, option: str) -> str:
    try:
        return getpass.getpass(prompt)
    except EOFError:
        raise UsageError(f"{option}: no password given (end of input)") from None
