"""No function in src/ or bench/ runs over 60 lines unless its def line says why (``# long: REASON``)."""

import ast

import pytest

from helpers import REPO

pytestmark = pytest.mark.unit

LIMIT = 60
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
