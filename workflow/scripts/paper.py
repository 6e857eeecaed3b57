"""Snakemake script: headline, samples, figures, base evaluation, probes -> results/report/paper.html."""

import logging
from pathlib import Path

from anchormask import fileio
from anchormask.reporting import paper
from anchormask.repro import runlog


def main(smk):
    runlog.log_to(smk.log[0])
    figures = list(zip(smk.params.figures, smk.input.figures))
    base_eval = Path(smk.input.base_eval[0]).read_text() if smk.input.base_eval else None
    text = paper.paper_html(Path(smk.input.headline).read_text(), Path(smk.input.samples).read_text(), figures,
                            Path(smk.input.caption).read_text(), Path(smk.input.probes).read_text(), base_eval,
                            confidence=float(smk.params.confidence),
                            training=(smk.input.training, Path(smk.input.training_caption).read_text()))
    fileio.write_text(smk.output[0], text)
    logging.info("wrote %s (%d figures, base evaluation %s)", smk.output[0], len(figures),
                 "included" if base_eval is not None else "not available")


main(snakemake)  # noqa: F821
