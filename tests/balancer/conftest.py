"""The balancer tests run real engines (tests/serve's server fixtures) behind
a real HAProxy; the canary's spec tests write specs as tests/sysconfig's do."""

import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
for folder in ("serve", "sysconfig"):
    sys.path.insert(0, str(TESTS / folder))

from serve_support import mlp_file, module_mlp_file, module_serve_factory, serve_factory  # noqa: E402,F401
