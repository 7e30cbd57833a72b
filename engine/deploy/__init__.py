"""Deploy: build a release bundle and roll it out to the spec's hosts.

Two halves with a hard boundary between them:

* deployer side (this machine, the repo's .venv): pipeline (steps with
  content-hash skipping), bundle (reproducible tarball), targets (local root
  and SSH fleet), report (progress and the per-host table), bench,
  reference (smoke inputs and outputs), convert_models (`invoke convert`),
  haproxy (the balancer's runtime API), balancer_host (HAProxy's config on
  balancer hosts), balancer_rollout (drain, install, ready).
* host side, shipped inside the bundle and run with the host's bare python3
  (stdlib only, nothing else may be imported; bundle.INSTALLER_FILES, checked
  by tests/test_layers.py): remote (the command line), install (the
  operations: install, rollback, stop, status), hostroot (releases, current,
  history, lock), prepare (release files and venv), service (start, stop,
  check-host, verify serving), supervise (pidfile process when systemd is not
  in charge), verify (health wait, smoke inference), tokens (bearer tokens for
  an auth-enabled engine).
* in the release's venv on the host: host_config (provisioning the config
  through hostspec, run by install).

This module and engine.errors are imported on both sides, so they stay
stdlib-only too.
"""

from __future__ import annotations

from engine.errors import EngineError


class DeployError(EngineError):
    """A deploy step cannot go on. One line for the user: where, what, hint."""
