from anchormask import data, runlog

runlog.log_to(snakemake.log[0])
data.gather_generations(list(snakemake.input), snakemake.output[0])
