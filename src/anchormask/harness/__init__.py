"""The adapters on the field's benchmarks: lm-evaluation-harness with the project's loader and sampler.

``likelihood``: the Monte-Carlo log-likelihood of a continuation under a masked-diffusion LM (LLaDA's
estimate); ``model``: the registered lm-eval model ``anchormask``; ``tasks``: the project's own local
tasks (``task_files/``) and where lm-eval finds them; ``evaluation``: one evaluation of the DAG's
stage; ``results``: the stage's table and figure.
"""
