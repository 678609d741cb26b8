#!/usr/bin/python
"""Ansible module fairbench_server: wait until a started server is healthy and describe it and its host."""

from __future__ import annotations

from ansible.module_utils.basic import AnsibleModule

try:
    from fairbench.hosts.ansible_support import ServingError, host_facts, wait_until_healthy
except ImportError as exc:
    FAIRBENCH_IMPORT_ERROR = (
        f"fairbench is not importable: use fairbench's venv Python (ansible_python_interpreter): {exc}"
    )
else:
    FAIRBENCH_IMPORT_ERROR = ""

DOCUMENTATION = r"""
module: fairbench_server
short_description: Wait for a fairbench server unit to answer /health_generate; return /server_info
description:
  - Runs on the GPU host with fairbench's venv as its Python (C(ansible_python_interpreter)).
  - Polls /health_generate until it answers 200, and fails at once, naming the unit's state, when the
    unit stops being active (a crash while loading), or when C(timeout_s) passes.
  - Returns the server's /server_info and the host facts that host.json records. Reads only (never changed);
    in check mode nothing is started, so it returns no server_info.
options:
  url:
    description: The server's base URL.
    type: str
    required: true
  unit:
    description: The server's systemd unit.
    type: str
    required: true
  timeout_s:
    description: Seconds the server may take to become healthy.
    type: int
    default: 3600
"""

EXAMPLES = r"""
- name: Wait until healthy
  fairbench_server:
    url: http://127.0.0.1:30000
    unit: fairbench-demo-tp8.service
    timeout_s: 600
"""

RETURN = r"""
server_info:
  description: The server's /server_info.
  type: dict
host:
  description: OS, kernel, Python and fairbench version of the host, and its GPUs (gpu: fairbench.hosts.gpu).
  type: dict
"""


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "url": {"type": "str", "required": True},
            "unit": {"type": "str", "required": True},
            "timeout_s": {"type": "int", "default": 3600},
        },
        supports_check_mode=True,
    )
    if FAIRBENCH_IMPORT_ERROR:
        module.fail_json(msg=FAIRBENCH_IMPORT_ERROR)
    params = module.params
    if module.check_mode:
        module.exit_json(changed=False, server_info={}, host=host_facts())
    try:
        server_info = wait_until_healthy(params["url"].rstrip("/"), params["unit"], params["timeout_s"])
    except ServingError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=False, server_info=server_info, host=host_facts())


if __name__ == "__main__":
    main()
