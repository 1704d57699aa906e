"""launchlab: controlled experiments on LLM inference-server launches."""

__version__ = "0.1.0"
