"""Flag values as a campaign writes them (``args``, ``sim``, a router's ``args``): names spelled as on the
command line without ``--``, lowercase words joined by ``-`` (``FLAG_NAME``), each value one that fits a
systemd unit. ``sglang_args`` then judges each by the rules on single SGLang flags
(``fairbench.campaign.sglang_flags``)."""

from __future__ import annotations

import re

from fairbench.campaign.checks import fits_a_unit, is_scalar, keyed
from fairbench.campaign.findings import Findings, describe, join_path
from fairbench.campaign.model import ArgValue
from fairbench.campaign.sglang_flags import check_arg

FLAG_NAME = re.compile(r"[a-z0-9]+(-[a-z0-9]+)*")


def flags(findings: Findings, path: str, value: object) -> dict[str, ArgValue]:
    """Command-line flags spelled without ``--``, with their values."""
    found: dict[str, ArgValue] = {}
    for key, item in keyed(findings, path, value).items():
        key_path = join_path(path, key)
        if not FLAG_NAME.fullmatch(key):
            findings.error(
                key_path, "is not a flag as on the command line: lowercase words joined by '-', no '--'"
            )
        elif isinstance(item, bool) or is_scalar(item):
            if fits_a_unit(findings, key_path, item):
                found[key] = item
        elif isinstance(item, list) and item and all(is_scalar(element) for element in item):
            fits = [fits_a_unit(findings, f"{key_path}[{i}]", element) for i, element in enumerate(item)]
            if all(fits):
                found[key] = tuple(item)
        else:
            findings.error(
                key_path,
                "must be true, false, a number, a string or a non-empty list of numbers and strings, "
                f"got {describe(item)}",
            )
    return found


def sglang_args(findings: Findings, path: str, value: object) -> dict[str, ArgValue]:
    """``flags``, each then judged by the rules on single SGLang flags where it is written."""
    args = flags(findings, path, value)
    for key, item in args.items():
        check_arg(findings, join_path(path, key), key, item)
    return args
