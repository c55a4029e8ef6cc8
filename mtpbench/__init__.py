"""mtpbench: acceptance-rate regression bench and CI gate for speculative decoding on vLLM."""

__version__ = "0.1.0"
