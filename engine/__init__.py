"""ai-engine: an inference engine whose every FLOP runs in kernels this repo wrote."""

__version__ = "0.1.0"
