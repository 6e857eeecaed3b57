"""The documentation's references hold: what cites docs/protocol.md names one of its sections; the README
stays short, names every docs page, and every relative link of the README and docs/ resolves; every
README section, docs page (and its section) and repository path that the code, config and profiles name
exists; docs/ state what is true now, with no before/now tables."""

import re

import pytest

from helpers import REPO

pytestmark = pytest.mark.unit

CITATION = re.compile(r'(?:docs/protocol\.md`?|\[protocol\.md\]\(protocol\.md\)),\s+"([^"]+)"')
CITING = ("README.md", "docs", "bench", "config", "src", "tests", "workflow")


def protocol_headings() -> set[str]:
    lines = (REPO / "docs" / "protocol.md").read_text().splitlines()
    return {line.lstrip("#").strip() for line in lines if line.startswith("## ") or line.startswith("### ")}


def citing_files():
    for name in CITING:
        path = REPO / name
        files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
        for file in files:
            if file.suffix in {".py", ".md", ".yaml", ".smk", ".rst"} and "__pycache__" not in file.parts:
                yield file


def test_every_protocol_citation_names_a_section():
    headings = protocol_headings()
    assert {"Data", "Generation", "Metric", "Statistics", "Mechanism probes"} <= headings
    cited, wrong = 0, []
    for file in citing_files():
        text = file.read_text(errors="replace")
        for section in CITATION.findall(text):
            cited += 1
            if section not in headings:
                wrong.append(f"{file.relative_to(REPO)}: {section!r}")
    assert cited >= 5 and wrong == []


def test_no_reference_to_a_protocol_outside_the_repository():
    this = (REPO / "tests" / "test_docs.py").resolve()
    stale = [str(f.relative_to(REPO)) for f in citing_files() if f.resolve() != this
             and re.search(r"PROTOCOL\b", f.read_text(errors="replace"))]
    assert stale == []


LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def docs_pages() -> list:
    return sorted((REPO / "docs").glob("*.md"))


def test_readme_is_read_in_one_sitting():
    assert len((REPO / "README.md").read_text().splitlines()) <= 200


def test_readme_keeps_the_two_commands():
    lines = (REPO / "README.md").read_text().splitlines()
    assert "bash .ci/setup && .venv/bin/snakemake --cores 2" in lines
    assert "bash .ci/setup && .venv/bin/pytest" in lines


def test_readme_names_every_docs_page():
    readme = (REPO / "README.md").read_text()
    missing = [p.name for p in docs_pages() if f"docs/{p.name}" not in readme]
    assert missing == []


def test_every_relative_link_of_the_readme_and_docs_resolves():
    files = [REPO / "README.md", *docs_pages(), REPO / "results" / "README.md",
             REPO / "results" / "published" / "README.md"]
    checked, broken = 0, []
    for file in files:
        for target in LINK.findall(file.read_text()):
            if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
                continue  # a URL, or an anchor on the same page
            checked += 1
            if not (file.parent / target.split("#")[0]).exists():
                broken.append(f"{file.relative_to(REPO)}: {target}")
    assert checked >= 10 and broken == []


# ------------------------------------------------------------------------ references in code and config

PACKAGE = REPO / "src" / "anchormask"
TOP_FOLDERS = ("src", "workflow", "bench", "tests", "config", "slurm", "envs", "data", "docs", ".ci")
SUBPACKAGES = tuple(sorted(p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()))
REPO_PATH = re.compile(r"(?<![\w./-])((?:%s)/[\w./-]*\w)" % "|".join(map(re.escape, TOP_FOLDERS + SUBPACKAGES)))
SECTION_OF = re.compile(r"(README|docs/[\w-]+\.md)(?:\.md)?,?\s+\\?\"([^\"\\]+)\\?\"")
# A citation may run over a line break: a comment's next line, or Python's adjacent string literals.
CONTINUATION = re.compile(r"\"?\s*\n\s*(?:#\s*)?(?:f?\")?")
REFERRING = ("config.yaml", "config", "envs", "slurm", "workflow", "src")
SUFFIXES = {".py", ".yaml", ".smk", ".txt", ".rst", ".md", ".sh"}


def headings(page) -> set[str]:
    """A page's headings and its paragraphs' bold run-in labels (**Decoding options** ...)."""
    lines = page.read_text().splitlines()
    return ({line.lstrip("#").strip() for line in lines if line.startswith("#")}
            | {m.group(1) for line in lines if (m := re.match(r"\*\*([^*]+)\*\*", line))})


def referring_files() -> list:
    files = []
    for name in REFERRING:
        path = REPO / name
        found = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
        files += [f for f in found if f.suffix in SUFFIXES and "__pycache__" not in f.parts
                  and not any(part.endswith(".egg-info") for part in f.parts)]
    return files


def stale_references(files) -> list[str]:
    """Each README section, docs page or section, and repository path named in ``files`` that does not exist,
    as 'file:line: what'. A path resolves from the repository, the package or the file's own folder."""
    stale = []
    for file in files:
        text = file.read_text(errors="replace")
        where = file.relative_to(REPO) if file.is_relative_to(REPO) else file
        for number, line in enumerate(text.splitlines(), 1):
            for path in REPO_PATH.findall(line):
                if not any(c in path for c in "*{<") and not any(
                        (root / path).exists() for root in (REPO, PACKAGE, file.parent)):
                    stale.append(f"{where}:{number}: {path}")
        joined = CONTINUATION.sub(" ", text)
        for page, section in SECTION_OF.findall(joined):
            section = " ".join(section.split())
            target = REPO / ("README.md" if page == "README" else page)
            if not target.is_file() or section not in headings(target):
                stale.append(f"{where}: {page}, section {section!r}")
    return stale


def test_every_section_page_and_path_that_code_and_config_name_exists():
    files = referring_files()
    assert len(files) > 100 and stale_references(files) == []


def test_the_reference_check_finds_a_planted_stale_reference(tmp_path):
    planted = tmp_path / "rule.smk"
    planted.write_text('# see README "No such section"; docs/real-bases.md, "Running on a GPU" holds;\n'
                       '# the module moved: src/anchormask/embedded_base/base_eval.py; docs/gone.md\n'
                       'MESSAGE = ("install the 4.x set (README \\"Using a real "\n    "base\\")")\n')
    assert stale_references([planted]) == [
        f"{planted}:2: src/anchormask/embedded_base/base_eval.py", f"{planted}:2: docs/gone.md",
        f"{planted}: README, section 'No such section'", f"{planted}: README, section 'Using a real base'"]


def test_docs_pages_carry_no_before_and_now_tables():
    """History goes in CHANGELOG.md; a page states the current figure and the command that produces it."""
    tables = [f"{page.name}: {line.strip()}" for page in docs_pages() for line in page.read_text().splitlines()
              if line.lstrip().startswith("|") and re.search(r"\bbefore\b", line, re.I)
              and re.search(r"\bnow\b", line, re.I)]
    assert tables == []
