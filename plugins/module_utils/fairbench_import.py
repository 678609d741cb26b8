"""The import guard of every fairbench module: the fairbench package is the one library they all require.

A module whose import raises is reported by Ansible as a bare traceback. Caught here instead, the failure
says which Python lacked fairbench and where fairbench belongs: on the control node, the venv running
ansible-playbook; on a GPU host, fairbench's own venv, which the bench role installs and every host-side
task names as its ``ansible_python_interpreter``.
"""

from __future__ import annotations

import traceback
from types import TracebackType
from typing import Any

from ansible.module_utils.basic import missing_required_lib

ON_CONTROL_NODE = "in the venv running ansible-playbook (pip install fairbench, or make venv in a checkout)"
ON_GPU_HOST = "in fairbench's venv on the host (the bench role installs it), as ansible_python_interpreter"


class FairbenchImport:
    """Wraps a module's imports of fairbench; holds their ImportError until ``check`` can fail the task."""

    def __init__(self, where: str) -> None:
        self.where = where
        self.error: ImportError | None = None
        self.traceback = ""

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

    def check(self, module: Any) -> None:
        """Fail the task, naming the missing import and where fairbench belongs, if an import failed."""
        if self.error is not None:
            module.fail_json(
                msg=f"{missing_required_lib('fairbench')}. fairbench belongs {self.where}: {self.error}",
                exception=self.traceback,
            )
