"""The shape of the library: no function in src/ or bench/ over 60 lines unless its def line says why
(``# long: REASON``), no module of the package over 400 lines, and at most 8 modules at its top level
(the rest live in the package of their stage)."""

import ast

import pytest

from helpers import REPO

pytestmark = pytest.mark.unit

LIMIT = 60
MODULE_LIMIT = 400
TOP_LEVEL_MODULES = 8
PACKAGE = REPO / "src" / "anchormask"
MARKER = "# long:"


def long_functions(source: str, where: str) -> list[str]:
    """``where:line name (N lines)`` for each function over LIMIT lines without a reason on its def line."""
    lines = source.splitlines()
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        length = node.end_lineno - node.lineno + 1
        reason = lines[node.lineno - 1].partition(MARKER)[2].strip()
        if length > LIMIT and not reason:
            found.append(f"{where}:{node.lineno} {node.name} ({length} lines)")
    return found


def test_the_check_flags_a_long_function_and_accepts_a_stated_reason():
    body = "".join(f"    x{i} = {i}\n" for i in range(LIMIT))
    assert long_functions(f"def f():\n{body}", "m.py") == [f"m.py:1 f ({LIMIT + 1} lines)"]
    assert long_functions(f"def f():  {MARKER} one table, row by row\n{body}", "m.py") == []
    assert long_functions(f"def f():  {MARKER}\n{body}", "m.py") != []  # a marker without a reason is not one
    assert long_functions(f"def f():\n{body[:-len(body) // LIMIT]}", "m.py") == []  # exactly LIMIT lines


def test_no_function_in_src_or_bench_is_over_the_limit_without_a_reason():
    files = sorted(p for root in ("src", "bench") for p in (REPO / root).rglob("*.py"))
    assert files
    found = [f for p in files for f in long_functions(p.read_text(encoding="utf-8"), str(p.relative_to(REPO)))]
    assert not found, (f"functions over {LIMIT} lines: {'; '.join(found)}; split them, or put "
                       f"'{MARKER} <why>' on the def line")


def test_no_module_of_the_package_is_over_the_limit():
    sizes = {str(p.relative_to(PACKAGE)): len(p.read_text(encoding="utf-8").splitlines())
             for p in PACKAGE.rglob("*.py")}
    assert len(sizes) > TOP_LEVEL_MODULES
    over = sorted(f"{name} ({n} lines)" for name, n in sizes.items() if n > MODULE_LIMIT)
    assert not over, f"modules over {MODULE_LIMIT} lines: {', '.join(over)}; split each by idea"


def test_the_package_top_level_holds_few_modules_and_every_subpackage_says_what_it_holds():
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(top) <= TOP_LEVEL_MODULES, (f"{len(top)} modules at the top of src/anchormask: {top}; "
                                           "move some into a stage package")
    for init in PACKAGE.glob("*/__init__.py"):
        doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8")))
        assert doc, f"{init.relative_to(REPO)} has no docstring saying what the package holds"
        modules = {p.stem for p in init.parent.glob("*.py")} - {"__init__"}
        unnamed = sorted(m for m in modules if f"``{m}``" not in doc)
        assert not unnamed, f"{init.relative_to(REPO)}: its docstring does not name {unnamed}"


RULE_FILES = REPO / "workflow" / "rules"
HELPER_FILES = ("common.smk", "bases_common.smk")  # where the Python the rules call lives


def python_in_rule_file(text: str, where: str) -> list[str]:
    """``where:line what`` for each def and each lambda that spans lines in a rule file: the Python that
    decides the study lives in the package or in a helper file."""
    found, lines = [], text.splitlines()
    for number, line in enumerate(lines, start=1):
        code = line.split("#", 1)[0]
        if code.lstrip().startswith("def "):
            found.append(f"{where}:{number} a def")
        if "lambda" in code and code.count("(") + code.count("[") + code.count("{") > \
                code.count(")") + code.count("]") + code.count("}"):
            found.append(f"{where}:{number} a lambda over several lines")
    return found


def test_the_check_flags_a_def_and_a_lambda_over_lines_but_not_a_one_line_input_function():
    assert python_in_rule_file("def f():\n    pass\n", "r.smk") == ["r.smk:1 a def"]
    assert python_in_rule_file("x = lambda: (\n    1\n)\n", "r.smk") == ["r.smk:1 a lambda over several lines"]
    assert python_in_rule_file("        arm=lambda wc: as_json({'arm': wc.arm}),\n", "r.smk") == []


def test_rule_files_hold_rules():
    found = [f for smk in sorted(RULE_FILES.glob("*.smk")) if smk.name not in HELPER_FILES
             for f in python_in_rule_file(smk.read_text(encoding="utf-8"), f"workflow/rules/{smk.name}")]
    assert found == []
