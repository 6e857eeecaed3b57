"""What a workflow script runs, as a digest per module: the rule's ``code`` param.

Why: Snakemake's code trigger sees only a rule's script file, not the package modules the script
imports, so every rule carries these digests in its params. The module list is computed, not
written by hand: the script's ``anchormask`` imports, followed transitively through the package
(``import anchormask.x``, ``from anchormask import x``, ``from anchormask.x import y``,
``from . import x``). Subpackages count like modules (``anchormask.probes.lora`` is
``probes/lora.py``), and loading a module of a subpackage runs the subpackage's ``__init__`` too.

What counts as a change is what runs: each module's (and the script's) syntax tree with its
docstrings and its never-evaluated type annotations removed (a local variable's; a signature's where
the module has ``from __future__ import annotations``) and each run of import statements sorted, so
comments, docstrings, type annotations, formatting and the order of an import list rerun nothing,
while any change to an expression, a default, a constant or a string the code uses does. A module
that reads its own ``__doc__`` keeps its docstrings. A module's data are the files it declares in a
literal ``DATA_FILES`` tuple (paths relative to its folder): a YAML file by its parsed content, any
other by its bytes; nothing else that lies in a package folder (an editor's swap file, a ``.DS_Store``)
counts.

The param is canonical JSON, ``{label: digest}`` with one 16-hex-digit digest per module (labels
``__init__``, ``data``, ``model.backbone``, ``script:train_adapter.py``), so ``anchormask audit why``
can name the modules whose code changed since a job ran.
"""

from __future__ import annotations

import ast
import hashlib
import json
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from anchormask.fileio import InputError, canonical_json

PACKAGE = "anchormask"
PACKAGE_DIR = Path(__file__).resolve().parent.parent
DECLARATION = "DATA_FILES"  # the module-level name that lists a module's data files
SCRIPT_LABEL = "script:"
DIGEST_CHARS = 16  # 64 bits per module: a collision between two edits of one module is not a concern


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


def import_targets(node: ast.AST, current: str | None = None, current_is_package: bool = False) -> list[str]:
    """Package-relative names one statement may load ([] for anything but a project import)."""
    if isinstance(node, ast.Import):
        return _import_targets(node)
    if isinstance(node, ast.ImportFrom):
        return _from_targets(node, current, current_is_package)
    return []


def imported_modules(source: str, current: str | None = None, current_is_package: bool = False) -> set[str]:
    """Package-relative names of the ``anchormask`` modules a source text imports ('' = __init__);
    ``current`` names the module the text is (None for a script), ``current_is_package`` says it is
    a package's ``__init__`` (relative imports then start from it, not from its parent)."""
    return set(_imported_modules(source, current, current_is_package))


@cache
def _imported_modules(source: str, current: str | None, current_is_package: bool) -> frozenset[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        found.update(import_targets(node, current, current_is_package))
    if found:
        found.add("")  # any import of a submodule first runs the package's __init__
    return frozenset(found)


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


def module_name(label: str) -> str:
    """The inverse of ``module_label``."""
    return "" if label == "__init__" else label


def _is_docstring(node: ast.stmt) -> bool:
    return isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)


def _canonical_body(body: list[ast.stmt], drop_docstring: bool) -> list[ast.stmt]:
    """A body without its docstring, each run of consecutive imports sorted (names within one too)."""
    if drop_docstring and body and _is_docstring(body[0]):
        body = body[1:]
    out: list[ast.stmt] = []
    run: list[ast.stmt] = []
    for node in [*body, None]:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            node.names.sort(key=lambda alias: (alias.name, alias.asname or ""))
            run.append(node)
            continue
        out += sorted(run, key=ast.dump)
        run = []
        if node is not None:
            out.append(node)
    return out or [ast.Pass()]


def _postpones_annotations(tree: ast.Module) -> bool:
    return any(isinstance(n, ast.ImportFrom) and n.module == "__future__" and any(a.name == "annotations"
                                                                                  for a in n.names)
               for n in tree.body)


class _UnevaluatedAnnotations(ast.NodeTransformer):
    """Drops the type annotations that never run: a local variable's always (Python does not evaluate
    them; ``y: int = v`` in a function is ``y = v``), a signature's where the module postpones annotations
    (``from __future__ import annotations``). A class's annotations (a dataclass's fields) and a module's
    are kept."""

    def __init__(self, postponed: bool):
        self.postponed, self.in_function = postponed, False

    def _function(self, node):
        if self.postponed:
            args = node.args
            for arg in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]:
                if arg is not None:
                    arg.annotation = None
            node.returns = None
        return self._inside(node, in_function=True)

    def _inside(self, node, in_function: bool):
        outer, self.in_function = self.in_function, in_function
        self.generic_visit(node)
        self.in_function = outer
        return node

    visit_FunctionDef = visit_AsyncFunctionDef = _function

    def visit_ClassDef(self, node):
        return self._inside(node, in_function=False)

    def visit_AnnAssign(self, node):
        if not self.in_function:
            return node
        if node.value is None:
            node.annotation = ast.Constant(None)
            return node
        return ast.Assign(targets=[node.target], value=node.value)


def code_of(source: str) -> str:
    """What a source text runs: its syntax tree without comments, formatting, docstrings (unless the
    text reads ``__doc__``), type annotations that are never evaluated or the order of its import lists,
    as text."""
    tree = ast.parse(source)
    keep_docs = any(isinstance(n, ast.Name) and n.id == "__doc__" for n in ast.walk(tree))
    tree = _UnevaluatedAnnotations(_postpones_annotations(tree)).visit(tree)
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            node.body = _canonical_body(node.body, drop_docstring=not keep_docs)
        elif hasattr(node, "body") and isinstance(node.body, list):
            node.body = _canonical_body(node.body, drop_docstring=False)
    return ast.dump(tree, annotate_fields=False, include_attributes=False)


@cache
def _declared_names(source: str) -> tuple[str, ...]:
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == DECLARATION for t in node.targets):
            if isinstance(node.value, (ast.Tuple, ast.List)):
                return tuple(ast.literal_eval(node.value))
    return ()


def declared_data_files(path: Path) -> list[Path]:
    """The files module ``path`` declares that it reads: its literal ``DATA_FILES`` tuple, relative to its
    folder; a declared file that is missing is an error naming the module and the file."""
    files = [path.parent / name for name in _declared_names(path.read_text(encoding="utf-8"))]
    missing = [str(f) for f in files if not f.is_file()]
    if missing:
        raise InputError(f"{path}: {DECLARATION} names {', '.join(missing)}, which does not exist; "
                         "restore the file or remove it from the list")
    return files


@cache
def _code_digest(source: str) -> bytes:
    return hashlib.sha256(code_of(source).encode()).digest()


def _without_descriptions(node: Any) -> Any:
    """A JSON schema without its ``description`` annotations (a string under that key): no code runs
    them, and a property named ``description`` (a mapping) stays."""
    if isinstance(node, dict):
        return {k: _without_descriptions(v) for k, v in node.items() if not (k == "description" and isinstance(v, str))}
    if isinstance(node, list):
        return [_without_descriptions(v) for v in node]
    return node


@cache
def _data_digest(name: str, content: bytes) -> bytes:
    """A data file as its reader sees it: YAML by its parsed content (comments do not count; nor do a
    JSON schema's descriptions), any other file by its bytes."""
    if name.endswith((".yaml", ".yml")):
        document = yaml.safe_load(content.decode("utf-8"))
        if name.endswith(".schema.yaml"):
            document = _without_descriptions(document)
        content = canonical_json(document).encode()
    return hashlib.sha256(content).digest()


def file_digest(path: Path) -> str:
    """The digest of one source file's code and its declared data files, as the ``code`` param holds it
    (the parsed texts are cached by content, so a DAG build parses each module once)."""
    path = Path(path)
    digest = hashlib.sha256(_code_digest(path.read_text(encoding="utf-8")))
    for extra in declared_data_files(path):
        digest.update(extra.name.encode() + b"\0" + _data_digest(extra.name, extra.read_bytes()))
    return digest.hexdigest()[:DIGEST_CHARS]


def module_digest(name: str, package_dir: Path = PACKAGE_DIR) -> str | None:
    """The digest of module ``name`` of the package, None when it no longer exists."""
    path = _module_file(name, Path(package_dir))
    return None if path is None else file_digest(path)


def script_code(script: str | Path, package_dir: Path = PACKAGE_DIR) -> dict[str, str]:
    """Label -> digest for the script and every package module it loads."""
    script, package_dir = Path(script).resolve(), Path(package_dir).resolve()
    code = {f"{SCRIPT_LABEL}{script.name}": file_digest(script)}
    modules = {n: module_digest(n, package_dir) for n in import_closure(script, package_dir)}
    code |= {module_label(n): digest for n, digest in modules.items() if digest is not None}
    return dict(sorted(code.items()))


def script_code_digest(script: str | Path, package_dir: Path = PACKAGE_DIR) -> str:
    """The ``code`` param of the rule that runs ``script``: canonical JSON of ``script_code``."""
    return canonical_json(script_code(script, package_dir))


def changed_modules(recorded: str, scripts_dir: Path, package_dir: Path = PACKAGE_DIR) -> list[str]:
    """The labels of a recorded ``code`` param whose code differs now (or is gone); [] when the record is
    not of this form (a run from before the per-module digests: its whole param changed)."""
    try:
        before = json.loads(recorded)
    except (TypeError, ValueError):
        return []
    if not isinstance(before, dict):
        return []
    changed = []
    for label, digest in sorted(before.items()):
        if label.startswith(SCRIPT_LABEL):
            script = Path(scripts_dir) / label[len(SCRIPT_LABEL):]
            now = file_digest(script) if script.is_file() else None
        else:
            now = module_digest(module_name(label), package_dir)
        if now != digest:
            changed.append(label)
    return changed


def add_code_params(rules, scripts_dir: Path, package_dir: Path = PACKAGE_DIR) -> None:
    """Give each rule that runs a script its ``code`` param, the script's digests (``script_code_digest``).

    Called once the rules are defined (workflow/study.smk, workflow/rules/bases.smk), so a rule names its
    script once, in ``script:``; the digests are a param because Snakemake's params trigger is what reruns a
    job when a module its script imports changes. A rule that already carries them (from an earlier
    call) keeps them; one whose ``code`` param says anything else is an error, since it would miss edits.
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
        raise InputError("workflow/rules/*.smk: " + "; ".join(wrong))


def _folder_imports(path: Path) -> list[Path]:
    """The modules beside ``path`` that it imports by their plain names (``import x``, ``from x import y``)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
    return [path.parent / f"{n}.py" for n in sorted(names) if (path.parent / f"{n}.py").is_file()]


def user_code_digest(path: str | Path) -> str:
    """The digest of a user's file of code (a masking strategy) and of the modules it imports from its own
    folder, transitively, each counted as the package's modules are (``file_digest``)."""
    pending, seen = [Path(path).resolve()], {}
    while pending:
        current = pending.pop()
        if current not in seen:
            seen[current] = file_digest(current)
            pending += _folder_imports(current)
    root = Path(path).resolve().parent
    return hashlib.sha256(canonical_json({str(p.relative_to(root)): d for p, d in seen.items()}).encode()
                          ).hexdigest()[:DIGEST_CHARS]
