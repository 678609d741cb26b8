#!/usr/bin/python
"""Ansible module fairbench_server: wait until a started server is healthy and describe it and its host."""

from __future__ import annotations

DOCUMENTATION = r"""
module: fairbench_server
short_description: Wait for a fairbench server unit to answer /health_generate; return /server_info
description:
  - Runs on the GPU host with fairbench's venv as its Python (C(ansible_python_interpreter)).
  - Polls /health_generate until it answers 200, and fails at once, naming the unit's state, when the
    unit stops being active (a crash while loading), or when C(timeout_s) passes.
  - Returns the server's /server_info and the host facts that host.json records, with the exposure
    C(systemd-analyze security) rates the unit at. Reads only (never changed);
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
  fairbench.fairbench.fairbench_server:
    url: http://127.0.0.1:30000
    unit: fairbench-demo-tp8.service
    timeout_s: 600
"""

RETURN = r"""
server_info:
  description: The server's /server_info.
  type: dict
host:
  description: OS, kernel, Python and fairbench version of the host, and its GPUs (key gpu).
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.fairbench.fairbench.plugins.module_utils.fairbench_import import (
    ON_GPU_HOST,
    FairbenchImport,
)

with FairbenchImport(ON_GPU_HOST) as FAIRBENCH_IMPORT:
    from fairbench.hosts.ansible_support import ServingError, host_facts, wait_until_healthy


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "url": {"type": "str", "required": True},
            "unit": {"type": "str", "required": True},
            "timeout_s": {"type": "int", "default": 3600},
        },
        supports_check_mode=True,
    )
    FAIRBENCH_IMPORT.check(module)
    params = module.params
    if module.check_mode:
        module.exit_json(changed=False, server_info={}, host=host_facts(params["unit"]))
    try:
        server_info = wait_until_healthy(params["url"].rstrip("/"), params["unit"], params["timeout_s"])
    except ServingError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=False, server_info=server_info, host=host_facts(params["unit"]))


if __name__ == "__main__":
    main()
