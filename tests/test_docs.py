"""The documentation's references hold: what cites docs/protocol.md names one of its sections; the README
stays short, names every docs page, and every relative link of the README and docs/ resolves."""

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
