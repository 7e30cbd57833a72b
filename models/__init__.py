"""The model zoo: ONNX models built deterministically from code (onnx.helper +
numpy, no torch), for tests, benchmarks and the default `digits` deployment.
Entry point: `python -m models.zoo --help`."""
