"""Fixtures for the serving tests. The helpers live in serve_support.py: a
module named `conftest` is ambiguous on sys.path (every test folder has one),
so tests import helpers from serve_support by its own name."""

from serve_support import (mlp_file, module_mlp_file, module_serve_factory, run_gate, serve_factory,  # noqa: F401
                           zoo_mlp)
