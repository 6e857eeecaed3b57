"""Anchor-token masking study for masked-diffusion language models."""

__version__ = "0.1.0"
