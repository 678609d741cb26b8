"""The opening of every fairbench module: the import guard, and the AnsibleModule behind it.

The fairbench package is the one library they all require. A module whose import raises is reported by
Ansible as a bare traceback. Caught here instead, the failure says which Python lacked fairbench and where
fairbench belongs: on the control node, the venv running ansible-playbook; on a GPU host, fairbench's own
venv, which the bench role installs and every host-side task names as its ``ansible_python_interpreter``.
A module wraps its imports of fairbench in ``FairbenchImport.on_control_node()`` or ``.on_gpu_host()``
and takes its ``AnsibleModule`` from the guard's ``ansible_module``, which fails the task so if an import
failed.
"""

from __future__ import annotations

import traceback
from types import TracebackType
from typing import Any

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

ON_CONTROL_NODE = "in the venv running ansible-playbook (pip install fairbench, or make venv in a checkout)"
ON_GPU_HOST = "in fairbench's venv on the host (the bench role installs it), as ansible_python_interpreter"


class FairbenchImport:
    """Wraps a module's imports of fairbench; holds their ImportError until ``ansible_module`` can fail the
    task."""

    def __init__(self, where: str) -> None:
        self.where = where
        self.error: ImportError | None = None
        self.traceback = ""

    @classmethod
    def on_control_node(cls) -> FairbenchImport:
        """The guard of a module that runs on the control node."""
        return cls(ON_CONTROL_NODE)

    @classmethod
    def on_gpu_host(cls) -> FairbenchImport:
        """The guard of a module that runs on a GPU host."""
        return cls(ON_GPU_HOST)

    def __enter__(self) -> FairbenchImport:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool:
        if not isinstance(exc, ImportError):
            return False
        self.error = exc
        self.traceback = "".join(traceback.format_exception(exc_type, exc, tb))
        return True

    def ansible_module(self, argument_spec: dict[str, Any], **settings: Any) -> AnsibleModule:
        """The task's AnsibleModule (every fairbench module supports check mode), its arguments parsed; fails
        the task, naming the missing import and where fairbench belongs, if an import failed."""
        module = AnsibleModule(argument_spec=argument_spec, supports_check_mode=True, **settings)
        if self.error is not None:
            module.fail_json(
                msg=f"{missing_required_lib('fairbench')}. fairbench belongs {self.where}: {self.error}",
                exception=self.traceback,
            )
        return module
