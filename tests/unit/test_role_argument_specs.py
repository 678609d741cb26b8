"""Each role's meta/argument_specs.yml against its defaults/main.yml, the one place a role's defaults are set.

Ansible takes a role's defaults from defaults/main.yml only; the ``default:`` of argument_specs is what
ansible-doc shows and nothing else reads it, so only this test keeps the two the same. Its rules, for every
entry point of every role:

- an option's ``default:`` is the value of defaults/main.yml; an option without one is null there (Ansible
  documents a missing default as null), or required and absent there, or set by the role itself (vars/, or
  registered by its tasks, as ``bench_venv_python`` is);
- every variable of defaults/main.yml is an option of some entry point;
- the default has the option's ``type`` (and ``elements``, and is one of its ``choices``), and an option
  has the same type in every entry point that names it.

A default that is a Jinja template is documented as the template with each ``{{ expr }}`` written
``<expr>`` (its white space folded) and compared so: what it renders to depends on the host, the inventory
and the other settings, and argument_specs must not hold ``{{`` itself, which Ansible templates when it
validates the role's arguments. A template's type is not checked, since it is known only once rendered.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
ROLES = sorted(path.name for path in (REPO / "roles").iterdir() if path.is_dir())

TEMPLATE = re.compile(r"\{\{(.*?)\}\}", re.S)
TYPES: dict[str, tuple[type, ...]] = {
    "str": (str,),
    "path": (str,),
    "bool": (bool,),
    "int": (int,),
    "float": (float, int),
    "list": (list,),
    "dict": (dict,),
}
"""The YAML values each argument_specs type accepts (``raw``: any)."""


def documented(value: Any) -> Any:
    """A default of defaults/main.yml as argument_specs writes it: each ``{{ expr }}`` as ``<expr>``."""
    if isinstance(value, str):
        return TEMPLATE.sub(lambda match: f"<{' '.join(match[1].split())}>", value)
    if isinstance(value, list):
        return [documented(item) for item in value]
    if isinstance(value, dict):
        return {key: documented(item) for key, item in value.items()}
    return value


def _load(path: Path) -> Any:
    return yaml.safe_load(path.read_text()) if path.exists() else None


def _registered(node: Any) -> Iterator[str]:
    """The names a task list registers, blocks and their rescues included."""
    if isinstance(node, list):
        for item in node:
            yield from _registered(item)
    elif isinstance(node, dict):
        if isinstance(node.get("register"), str):
            yield node["register"]
        for item in node.values():
            yield from _registered(item)


def _type_problem(kind: str, elements: str | None, value: Any) -> str | None:
    """Why ``value`` is not of argument_specs type ``kind`` (None where it is, or cannot be told yet)."""
    if value is None or kind == "raw" or (isinstance(value, str) and TEMPLATE.search(value)):
        return None
    if kind not in TYPES:
        return f"type {kind!r} is none this test knows ({', '.join([*TYPES, 'raw'])})"
    # YAML's true is an int to Python: only a bool option takes one.
    if isinstance(value, bool) != (kind == "bool") or not isinstance(value, TYPES[kind]):
        return f"type {kind} but the default {value!r} is a {type(value).__name__}"
    if isinstance(value, list) and elements is not None:
        for item in value:
            if problem := _type_problem(elements, None, item):
                return f"elements: {problem}"
    return None


def _option_problems(
    option: dict[str, Any], name: str, defaults: dict[str, Any], set_by_role: set[str]
) -> list[str]:
    """How one option of an entry point disagrees with defaults/main.yml."""
    if option.get("required"):
        problems = ["required, and documents a default"] if "default" in option else []
        return problems + (["required, but defaults/main.yml sets it"] if name in defaults else [])
    if name not in defaults:
        if "default" in option:
            return [f"default {option['default']!r}, but defaults/main.yml does not set it"]
        if name not in set_by_role:
            return ["no default, not required, and the role does not set it (vars/, register)"]
        return []
    value = defaults[name]
    problems = []
    if option.get("default") != documented(value):
        problems.append(f"default {option.get('default')!r}, but defaults/main.yml: {documented(value)!r}")
    if problem := _type_problem(option.get("type", "str"), option.get("elements"), value):
        problems.append(problem)
    choices = option.get("choices")
    if choices is not None and value is not None and value not in choices:
        problems.append(f"default {value!r} is none of its choices {choices}")
    return problems


def role_problems(role: Path) -> list[str]:
    """Every disagreement between the role's argument_specs and its defaults/main.yml, one sentence each."""
    defaults: dict[str, Any] = _load(role / "defaults/main.yml") or {}
    specs: dict[str, Any] = (_load(role / "meta/argument_specs.yml") or {}).get("argument_specs", {})
    set_by_role = {name for path in sorted(role.glob("vars/*.yml")) for name in _load(path) or {}}
    set_by_role.update(name for path in sorted(role.glob("tasks/*.yml")) for name in _registered(_load(path)))
    problems = []
    shapes: dict[str, tuple[str, tuple[Any, ...]]] = {}
    for entry, spec in specs.items():
        for name, option in (spec.get("options") or {}).items():
            shape = (option.get("type", "str"), option.get("elements"), option.get("choices"))
            first, first_shape = shapes.setdefault(name, (entry, shape))
            if shape != first_shape:
                problems.append(
                    f"{entry}: {name}: (type, elements, choices) {shape} but {first_shape} in {first}"
                )
            problems += [
                f"{entry}: {name}: {why}" for why in _option_problems(option, name, defaults, set_by_role)
            ]
    problems += [
        f"{name}: set in defaults/main.yml, but an option of no entry point"
        for name in defaults
        if name not in shapes
    ]
    return problems


@pytest.mark.parametrize("role", ROLES)
def test_argument_specs_document_the_roles_defaults(role: str) -> None:
    assert (REPO / "roles" / role / "meta/argument_specs.yml").exists(), role
    assert role_problems(REPO / "roles" / role) == []


def test_a_template_default_is_documented_with_its_expressions_in_angle_brackets() -> None:
    assert documented("{{ cuda_home }}/bin:/usr/bin") == "<cuda_home>/bin:/usr/bin"
    assert documented("{{ a\n  | default(b) }}") == "<a | default(b)>"
    assert documented({"H": "{{ h }}", "N": "1", "L": ["x{{y}}"]}) == {"H": "<h>", "N": "1", "L": ["x<y>"]}
    assert documented(3) == 3


def test_each_rule_finds_its_disagreement(tmp_path: Path) -> None:
    role = tmp_path / "demo"
    files = {
        "defaults/main.yml": {
            "demo_port": 80,
            "demo_home": "{{ demo_root }}/home",
            "demo_name": None,
            "demo_secret": "x",
            "demo_undocumented": 1,
            "demo_wrong_type": "80",
            "demo_list": ["a", 1],
            "demo_mode": "fast",
        },
        "vars/main.yml": {"demo_derived": "{{ demo_port }}"},
        "tasks/main.yml": [{"block": [{"ansible.builtin.stat": {}, "register": "demo_stat"}]}],
        "meta/argument_specs.yml": {
            "argument_specs": {
                "main": {
                    "options": {
                        "demo_port": {"type": "int", "default": 8080},
                        "demo_home": {"type": "path", "default": "<demo_root>/home"},
                        "demo_name": {"type": "str"},
                        "demo_secret": {"type": "str", "required": True},
                        "demo_token": {"type": "str", "required": True, "default": "t"},
                        "demo_wrong_type": {"type": "int", "default": "80"},
                        "demo_list": {"type": "list", "elements": "str", "default": ["a", 1]},
                        "demo_mode": {"type": "str", "choices": ["slow"], "default": "fast"},
                        "demo_flag": {"type": "bool", "default": False},
                        "demo_input": {"type": "dict"},
                        "demo_derived": {"type": "str"},
                        "demo_stat": {"type": "dict"},
                    }
                },
                "other": {"options": {"demo_port": {"type": "str", "default": 80}}},
            }
        },
    }
    for name, content in files.items():
        (role / name).parent.mkdir(parents=True, exist_ok=True)
        (role / name).write_text(yaml.safe_dump(content, sort_keys=False))
    assert role_problems(role) == [
        "main: demo_port: default 8080, but defaults/main.yml: 80",
        "main: demo_secret: required, but defaults/main.yml sets it",
        "main: demo_token: required, and documents a default",
        "main: demo_wrong_type: type int but the default '80' is a str",
        "main: demo_list: elements: type str but the default 1 is a int",
        "main: demo_mode: default 'fast' is none of its choices ['slow']",
        "main: demo_flag: default False, but defaults/main.yml does not set it",
        "main: demo_input: no default, not required, and the role does not set it (vars/, register)",
        "other: demo_port: (type, elements, choices) ('str', None, None) but ('int', None, None) in main",
        "other: demo_port: type str but the default 80 is a int",
        "demo_undocumented: set in defaults/main.yml, but an option of no entry point",
    ]
