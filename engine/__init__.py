"""ai-engine: an inference engine whose every FLOP runs in kernels this repo wrote."""

__version__ = "0.1.0"


def __getattr__(name):
    # Lazy: `ai-engine --help` and the CLI stay fast without numpy/onnx imports.
    if name == "InferenceSession":
        from engine.session import InferenceSession

        return InferenceSession
    raise AttributeError(f"module 'engine' has no attribute {name!r}")


__all__ = ["InferenceSession", "__version__"]
