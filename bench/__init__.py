"""Speed and memory benchmarks of the anchormask pipeline (``python -m bench``; see bench/README.md).

Targets live here, never in the timed test suite. Every benchmark runs its competitors in one
process, on the same data, side by side, and writes ``results/bench/<name>.json`` (``--record``: also the
tracked ``bench/results/<name>.json``) with the machine's facts (cores, torch threads, device, load
average) next to the numbers.
"""
