"""Snakemake script: the table and figure across bases, each base's page -> results/report/paper.html."""

import logging
from pathlib import Path

from anchormask import fileio
from anchormask.reporting import bases as report_bases
from anchormask.repro import runlog


def main(smk):
    runlog.log_to(smk.log[0])
    papers = dict(zip(smk.params.bases, map(str, smk.input.papers)))
    page = report_bases.bases_paper_html(Path(smk.input.markdown).read_text(encoding="utf-8"), smk.input.figure, papers)
    fileio.write_text(smk.output[0], page)
    logging.info("wrote %s", smk.output[0])


main(snakemake)  # noqa: F821
