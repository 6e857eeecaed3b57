"""How every figure of the project looks and is saved: one rc set, one palette, and ``save``, which writes
the PDF and the PNG atomically and byte-stably (a fixed ``svg.hashsalt``, no CreationDate), so the same
table gives the same bytes. The study's figures, the probes', the bases' and lm-eval's all use it.
"""

from __future__ import annotations

import os
from typing import Any

import matplotlib
from matplotlib.figure import Figure
from matplotlib.typing import RcKeyType

from anchormask.fileio import atomic_path

RC: dict[RcKeyType, Any] = {"svg.hashsalt": "anchormask", "pdf.compression": 6, "font.family": "DejaVu Sans",
                            "font.size": 9, "axes.titlesize": 9, "figure.dpi": 100, "savefig.dpi": 150}
COLOURS = ("#7f7f7f", "#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#17becf", "#d62728", "#bcbd22",
            "#8c564b", "#e377c2")


def save(fig: Figure, pdf_path: str | os.PathLike[str], png_path: str | os.PathLike[str]) -> None:
    with matplotlib.rc_context(RC):
        with atomic_path(pdf_path) as tmp:
            fig.savefig(tmp, format="pdf", metadata={"CreationDate": None, "ModDate": None})
        with atomic_path(png_path) as tmp:
            fig.savefig(tmp, format="png")
