"""The study as one page: the HTML body that `snakemake --report` shows under the workflow description.

Snakemake's report lists each result behind a category link; a reader of a study wants its
paper: the headline tables, the samples, the figures with their captions, the base evaluation
and the probes' summary, in that order, on one page. ``paper_html`` builds that page as an HTML
fragment (markdown rendered by markdown-it-py, figures inlined as base64 PNG so the fragment
stands alone); workflow/report/workflow.rst includes it into the report's landing page.

Figure captions are the report's own (workflow/report/figure.rst, a Jinja template rendered per
figure and converted from reStructuredText by docutils, both Snakemake's own dependencies), so
the page and the report's figure view never disagree. The output is a pure function of the
inputs: the same files give the same bytes.
"""

from __future__ import annotations

import base64
import html
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import SimpleNamespace

from markdown_it import MarkdownIt

# Snakemake's landing view puts the description in a narrow column beside the rule graph and centres
# it vertically, which cuts off the top of a long page: widen it, stack the graph below, start at the top.
STYLE = """<style>
div.h-screen:has(.am-paper) { align-items: flex-start; justify-content: flex-start; }
div.items-start:has(.am-paper) { flex-direction: column; min-width: 0; max-width: 100%; }
div.items-start:has(.am-paper) > div { min-width: 0; max-width: 100%; }
.prose:has(.am-paper) { max-width: 1300px; }
.am-paper { max-width: 100%; font-size: 14px; line-height: 1.45; }
.am-paper section { margin: 1.5em 0 2.5em; }
.am-paper .am-scroll { overflow-x: auto; }
.am-paper table { border-collapse: collapse; margin: 0.6em 0 1.2em; font-size: 12px; }
.am-paper th, .am-paper td { border: 1px solid #ccc; padding: 3px 6px; vertical-align: top; white-space: nowrap; }
.am-paper #headline td:last-child { white-space: normal; min-width: 14em; }
.am-paper #samples td:nth-child(2) { white-space: normal; min-width: 26em; }
.am-paper th { background: #f2f2f2; }
.am-paper figure { margin: 1em 0 2em; }
.am-paper figure img { max-width: 100%; border: 1px solid #eee; }
.am-paper figcaption { font-size: 13px; color: #333; max-width: 1000px; }
.am-paper .am-missing { color: #8a5a00; background: #fff6e0; padding: 0.5em 1em; }
.am-paper code::before, .am-paper code::after { content: none; }
</style>"""


def markdown_html(text: str) -> str:
    """CommonMark with pipe tables, raw HTML escaped; wide tables scroll instead of overflowing."""
    rendered = MarkdownIt("commonmark", {"html": False}).enable("table").render(text)
    return rendered.replace("<table>", '<div class="am-scroll"><table>').replace("</table>", "</table></div>")


def caption_html(template: str, figure: str, confidence: float) -> str:
    """The report's caption for one figure: the Jinja template with that wildcard, then rST to HTML.

    The template reads the interval level from ``snakemake.config``, as in Snakemake's report; here
    the config holds that one setting (``statistics.confidence``), the one the paper job declares.
    """
    import jinja2
    from docutils.core import publish_parts

    smk = SimpleNamespace(wildcards=SimpleNamespace(figure=figure), config={"statistics": {"confidence": confidence}})
    text = jinja2.Template(template).render(snakemake=smk)
    return publish_parts(text, writer="html")["body"]


def figure_html(png: str | os.PathLike[str], caption: str) -> str:
    data = base64.b64encode(Path(png).read_bytes()).decode("ascii")
    return (f'<figure><img alt="{html.escape(Path(png).name)}" src="data:image/png;base64,{data}"/>'
            f"<figcaption>{caption}</figcaption></figure>")


def _section(anchor: str, title: str, body: str) -> str:
    return f'<section id="{anchor}"><h2>{html.escape(title)}</h2>\n{body}\n</section>'


def _demote(markdown: str) -> str:
    """A file's title (h1) gives way to its section's h2; its other headings move one level down."""
    lines = markdown.splitlines()
    return "\n".join("#" + line if line.startswith("##") else line for line in lines if not line.startswith("# "))


def paper_html(headline: str, samples: str, figures: Sequence[tuple[str, str | Path]], figure_caption: str,
               probes: str, base_eval: str | None, *, confidence: float,
               training: tuple[str | Path, str] | None = None) -> str:
    """The page: headline tables, samples, figures with captions, base evaluation, probes' summary.

    ``figures`` are (name, PNG path) pairs; ``figure_caption`` the text of workflow/report/figure.rst;
    ``training`` the training curves' PNG and the text of workflow/report/training.rst, after the figures;
    ``base_eval`` the markdown of results/base_eval/summary.md, None while the study has none;
    ``confidence`` the figures' interval level (``statistics.confidence``), which the captions state.
    """
    captioned = [(png, figure_caption, name) for name, png in figures]
    captioned += [(training[0], training[1], "training")] if training else []
    figure_body = "\n".join(figure_html(png, caption_html(text, name, confidence)) for png, text, name in captioned)
    base_body = (markdown_html(_demote(base_eval)) if base_eval is not None else
                 '<p class="am-missing">Not available: this study has no base evaluation '
                 "(<code>results/base_eval/summary.md</code>).</p>")
    sections: Mapping[str, tuple[str, str]] = {
        "headline": ("1. Headline results", markdown_html(_demote(headline))),
        "samples": ("2. Samples", markdown_html(_demote(samples))),
        "figures": ("3. Figures", figure_body),
        "base-evaluation": ("4. Base evaluation", base_body),
        "probes": ("5. Mechanism probes", markdown_html(_demote(probes))),
    }
    body = "\n".join(_section(anchor, title, content) for anchor, (title, content) in sections.items())
    return f'{STYLE}\n<div class="am-paper">\n{body}\n</div>\n'
