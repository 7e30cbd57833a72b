"""The balancer tests run real engines (tests/serve's server fixtures) behind
a real HAProxy."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "serve"))

from serve_support import mlp_file, serve_factory  # noqa: E402,F401
