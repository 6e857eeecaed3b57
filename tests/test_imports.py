"""Imports run one way, down the stages: a module of the package imports only stages below its own (or
modules of its own stage, without a cycle), and never imports the package inside a function or under
``if TYPE_CHECKING`` (a hidden cycle). Why: the code digest of a job (repro/codedigest.py) is the
import closure of its script, so an upward import makes a job rerun for code it never runs.

The stages, bottom to top (docs/layout.md draws them). A stage is a top-level module or subpackage.
"""

import ast
from pathlib import Path

import pytest

from anchormask.repro.codedigest import import_targets
from helpers import REPO

pytestmark = pytest.mark.unit

PACKAGE = REPO / "src" / "anchormask"
STAGES = (  # each row may import the rows above it
    ("fileio", "checksum", "progress"),
    ("schemas", "repro"),
    ("study",),
    ("data", "embedded_base"),
    ("model",),
    ("training",),
    ("generation",),
    ("measurement",),
    ("stats",),
    ("probes",),
    ("reporting",),
    ("settings",),
    ("harness",),
    ("base_eval",),
    ("cli",),
)
LEVEL = {stage: level for level, row in enumerate(STAGES) for stage in row}


def module_of(path: Path, package: Path) -> str:
    """``model.backbone`` for model/backbone.py, ``model`` for model/__init__.py."""
    parts = list(path.relative_to(package).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _statements(tree: ast.AST, hidden: bool = False):
    """(statement, hidden) for every node, ``hidden`` inside a function or an ``if TYPE_CHECKING``."""
    for node in ast.iter_child_nodes(tree):
        inner = hidden or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) or (
            isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test))
        yield node, hidden
        yield from _statements(node, inner)


def _is_module(name: str, package: Path) -> bool:
    parts = name.split(".")
    return bool(name) and ((package.joinpath(*parts).with_suffix(".py")).is_file()
                           or (package.joinpath(*parts) / "__init__.py").is_file())


def project_imports(path: Path, package: Path):
    """(line, imported modules, hidden) for each statement of ``path`` that imports package modules; ``from
    x import name`` imports x unless ``x.name`` is itself a module (then x's ``__init__`` is left out)."""
    current = module_of(path, package)
    for node, hidden in _statements(ast.parse(path.read_text(encoding="utf-8"))):
        names = [n for n in import_targets(node, current, path.name == "__init__.py") if _is_module(n, package)]
        names = [n for n in names if n != current and not any(m.startswith(n + ".") for m in names)]
        if names:
            yield node.lineno, sorted(set(names)), hidden


def stage_of(module: str) -> str:
    return module.split(".")[0]


def _below(target: str, module: str, levels: dict[str, int]) -> bool:
    return stage_of(target) in levels and levels[stage_of(target)] < levels[stage_of(module)]


def import_problems(package: Path, levels: dict[str, int]) -> list[str]:
    """``file:line: what is wrong`` for each hidden import, upward or sideways import, unknown stage and cycle."""
    problems, graph = [], {}
    for path in sorted(package.rglob("*.py")):
        module, where = module_of(path, package), path.relative_to(package.parent.parent)
        if module == "":
            continue  # the package's own __init__: the version, no imports
        if stage_of(module) not in levels:
            problems.append(f"{where}: stage {stage_of(module)!r} is in no row of STAGES; add it")
            continue
        for line, targets, hidden in project_imports(path, package):
            upward = [t for t in targets if stage_of(t) != stage_of(module) and not _below(t, module, levels)]
            if hidden:
                problems.append(f"{where}:{line}: imports {', '.join(targets)} inside a function or under "
                                "TYPE_CHECKING; import at the top, moving what both sides share into a module "
                                "below both")
            elif upward:
                problems.append(f"{where}:{line}: {module} imports {', '.join(upward)}, not below its stage")
            for target in targets if not hidden else []:
                graph.setdefault(module, {}).setdefault(target, line)
    return problems + _cycles(graph, package)


def _cycles(graph: dict[str, dict[str, int]], package: Path) -> list[str]:
    """One message per import cycle among modules (of one stage: other stages are refused above)."""
    found, state = [], {}

    def visit(module: str, stack: list[str]) -> None:
        state[module] = "open"
        for target in sorted(graph.get(module, {})):
            if state.get(target) == "open":
                loop = stack[stack.index(target):] + [module, target] if target in stack else [module, target]
                found.append(f"src/{package.name}: import cycle {' -> '.join(dict.fromkeys(loop))} -> {target} "
                             f"({module} imports it at line {graph[module][target]})")
            elif target not in state:
                visit(target, [*stack, module])
        state[module] = "done"

    for module in sorted(graph):
        if module not in state:
            visit(module, [])
    return found


def test_the_package_imports_run_one_way_down_the_stages():
    assert import_problems(PACKAGE, LEVEL) == []


def _write(root: Path, files: dict[str, str]) -> Path:
    package = root / "src" / "anchormask"
    for name, text in files.items():
        (package / name).parent.mkdir(parents=True, exist_ok=True)
        (package / name).write_text(text, encoding="utf-8")
    return package


def test_the_check_names_an_upward_import_a_hidden_one_and_a_cycle_with_file_and_line(tmp_path):
    levels = {"fileio": 0, "model": 1, "stats": 2}
    package = _write(tmp_path, {
        "__init__.py": "", "fileio.py": "from anchormask.model import backbone\n",
        "model/__init__.py": "", "model/backbone.py": "import os\n\n\ndef f():\n    from anchormask import stats\n",
        "stats/__init__.py": "", "stats/a.py": "from anchormask.stats import b\n",
        "stats/b.py": "from . import a\nfrom anchormask import fileio\n",
    })
    assert import_problems(package, levels) == [
        "src/anchormask/fileio.py:1: fileio imports model.backbone, not below its stage",
        "src/anchormask/model/backbone.py:5: imports stats inside a function or under TYPE_CHECKING; import at the "
        "top, moving what both sides share into a module below both",
        "src/anchormask: import cycle stats.a -> stats.b -> stats.a (stats.b imports it at line 1)",
    ]


def test_the_check_sees_a_type_checking_import_and_a_stage_missing_from_the_table(tmp_path):
    package = _write(tmp_path, {
        "__init__.py": "", "fileio.py": "",
        "extra.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from anchormask import fileio\n",
    })
    assert import_problems(package, {"fileio": 0, "extra": 1}) == [
        "src/anchormask/extra.py:3: imports fileio inside a function or under TYPE_CHECKING; import at the top, "
        "moving what both sides share into a module below both"]
    assert import_problems(package, {"fileio": 0}) == [
        "src/anchormask/extra.py: stage 'extra' is in no row of STAGES; add it"]


def test_every_stage_of_the_table_exists_in_the_package():
    stages = {stage_of(module_of(p, PACKAGE)) for p in PACKAGE.rglob("*.py")} - {""}
    assert set(LEVEL) == stages
