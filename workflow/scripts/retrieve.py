from anchormask import io, retrieval, runlog

runlog.log_to(snakemake.log[0])
io.write_jsonl(snakemake.output[0], retrieval.study_anchors(snakemake.config, snakemake.wildcards.domain,
                                                            snakemake.wildcards.query_set))
