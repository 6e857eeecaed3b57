"""SHA-256 of the library code a workflow script runs, from the script's import closure.

Why: Snakemake's code trigger sees only a rule's script file, not the package modules the script
imports, so every rule carries this digest in its params. Hand-written module lists drifted from
the imports (a rule omitted a module its script imports, and editing it reran nothing); here the
list is computed: the script's ``anchormask`` imports, followed transitively through the package
(``import anchormask.x``, ``from anchormask import x``, ``from anchormask.x import y``,
``from . import x``; imports inside functions count too, since they run when the function does).
Subpackages count like modules (``anchormask.probes.lora`` is ``probes/lora.py``), and loading a
module of a subpackage runs the subpackage's ``__init__`` too.
"""

from __future__ import annotations

import ast
import hashlib
from functools import cache
from pathlib import Path

PACKAGE = "anchormask"
PACKAGE_DIR = Path(__file__).resolve().parent


def _module_file(name: str, package_dir: Path) -> Path | None:
    """The source file of module ``name`` ('' is the package itself, ``a.b`` is ``a/b.py`` or the
    subpackage ``a/b/__init__.py``), or None outside the package."""
    if name == "":
        return package_dir / "__init__.py"
    parts = name.split(".")
    for path in (package_dir.joinpath(*parts[:-1], f"{parts[-1]}.py"), package_dir.joinpath(*parts, "__init__.py")):
        if path.is_file():
            return path
    return None


def _parents(name: str) -> list[str]:
    """The subpackages whose ``__init__`` runs before module ``name`` (``a.b.c`` -> ``a``, ``a.b``)."""
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def _from_targets(node: ast.ImportFrom, current: str | None, current_is_package: bool = False) -> list[str]:
    """Package-relative module names that one ``from ... import ...`` statement loads."""
    if node.level:  # relative: only meaningful inside the package (a script has no package)
        if current is None:
            return []
        package = current.split(".") if current else []
        if not current_is_package:
            package = package[:-1]
        package = package[:len(package) - (node.level - 1)] if node.level > 1 else package
        base = ".".join([*package, *([node.module] if node.module else [])])
    elif node.module == PACKAGE:
        base = ""
    elif node.module and node.module.startswith(PACKAGE + "."):
        base = node.module[len(PACKAGE) + 1:]
    else:
        return []
    names = [base] if base else []
    # `from anchormask import x` may name a module x; `from anchormask.x import y` names attributes of x.
    names += [f"{base}.{a.name}" if base else a.name for a in node.names]
    return names


def _import_targets(node: ast.Import) -> list[str]:
    return [a.name[len(PACKAGE) + 1:] if a.name != PACKAGE else "" for a in node.names
            if a.name == PACKAGE or a.name.startswith(PACKAGE + ".")]


def imported_modules(source: str, current: str | None = None, current_is_package: bool = False) -> set[str]:
    """Package-relative names of the ``anchormask`` modules a source text imports ('' = __init__);
    ``current`` names the module the text is (None for a script), ``current_is_package`` says it is
    a package's ``__init__`` (relative imports then start from it, not from its parent)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(_import_targets(node))
        elif isinstance(node, ast.ImportFrom):
            found.update(_from_targets(node, current, current_is_package))
    if found:
        found.add("")  # any import of a submodule first runs the package's __init__
    return found


@cache
def import_closure(script: Path, package_dir: Path = PACKAGE_DIR) -> tuple[str, ...]:
    """Sorted names of every package module the script loads, directly or through other modules."""
    pending = list(imported_modules(Path(script).read_text(encoding="utf-8")))
    closure: set[str] = set()
    while pending:
        name = pending.pop()
        path = _module_file(name, package_dir)
        if name in closure or path is None:
            continue  # seen already, or an attribute (a function, a class) rather than a module
        closure.add(name)
        pending += _parents(name)
        pending += imported_modules(path.read_text(encoding="utf-8"), current=name,
                                    current_is_package=path.name == "__init__.py")
    return tuple(sorted(closure))


def module_label(name: str) -> str:
    return name or "__init__"


def data_files(name: str, package_dir: Path = PACKAGE_DIR) -> list[Path]:
    """A subpackage's data files (``schemas/*.yaml`` beside ``schemas/__init__.py``): code reads them
    as it reads its modules, so an edit of one must rerun the same jobs."""
    path = _module_file(name, package_dir)
    if not name or path is None or path.name != "__init__.py":
        return []
    return sorted(p for p in path.parent.iterdir() if p.is_file() and p.suffix not in (".py", ".pyc"))


def digest_of_modules(names, package_dir: Path = PACKAGE_DIR) -> str:
    """SHA-256 over each module's label and source bytes, then its subpackage's data files, in sorted
    order (stable across runs)."""
    digest = hashlib.sha256()
    for label, name in sorted((module_label(n), n) for n in set(names)):
        digest.update(label.encode() + b"\0" + _module_file(name, package_dir).read_bytes())
        for extra in data_files(name, package_dir):
            digest.update(f"{label}/{extra.name}".encode() + b"\0" + extra.read_bytes())
    return digest.hexdigest()


def script_code_digest(script: str | Path, package_dir: Path = PACKAGE_DIR) -> str:
    """The ``code`` param of the rule that runs ``script``."""
    return digest_of_modules(import_closure(Path(script).resolve(), Path(package_dir).resolve()), package_dir)


def add_code_params(rules, scripts_dir: Path, package_dir: Path = PACKAGE_DIR) -> None:
    """Give each rule that runs a script its ``code`` param, the script's digest (``script_code_digest``).

    Called once the rules are defined (workflow/study.smk, workflow/rules/bases.smk), so a rule names its
    script once, in ``script:``; the digest is a param because Snakemake's params trigger is what reruns a
    job when a module its script imports changes. A rule that already carries this digest (from an earlier
    call) keeps it; one whose ``code`` param says anything else is an error, since it would miss edits.
    """
    wrong = []
    for rule in rules:
        if not rule.script:
            continue
        name = Path(rule.script).name
        digest = script_code_digest(Path(scripts_dir) / name, package_dir)
        code = rule.params.get("code")
        if code is None:
            rule.set_params(code=digest)
        elif code != digest:
            wrong.append(f"rule {rule.name}: params.code is not the digest of {name}; leave `code` out of "
                         "params (it is derived from the rule's script)")
    if wrong:
        from anchormask.fileio import InputError

        raise InputError("workflow/rules/*.smk: " + "; ".join(wrong))
