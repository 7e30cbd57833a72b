"""A rollout behind the balancer that fails no request: each engine host is
taken out of the rotation on every balancer before its engine restarts and
put back once it serves again.

Per engine host behind the balancer (balancer.engines, or every one):

1. `drain` on each balancer's runtime API: no new requests or connections,
   the ones it holds go on;
2. wait until HAProxy holds no HTTP request to it (in flight or queued),
   bounded by engine.limits.drain_timeout_s; a bound that was hit is a
   warning, and the engine's own graceful stop (SIGTERM: answer what it
   holds, then close) finishes them. Binary-protocol connections are long
   sessions that never drain by themselves: the engine ends them the same
   way, with a GOODBYE after its last answer, and the client reconnects
   through the balancer to another host;
3. the install (switch release, start, verify; rollback on failure);
4. `ready`, and wait until HAProxy's health checks see it UP (bounded by
   deploy.health_timeout_s) before the host counts as done, so the next
   one drains only once this one takes traffic again. A host whose deploy
   failed is left `ready` only if its (old) release serves again, else
   `maint`, and the reason says which.

At most deploy.parallel hosts are out at once, and never every host behind
the balancer (Rollout.parallel).

A release the host will apply with the engine's SIGHUP reload (config only,
engine.deploy.reload, decided here on the deployer's copies of the host's
active bundle and the new one) is installed without draining: the engine
keeps its process and listeners, so the host stays in the rotation.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

from engine.deploy import DeployError
from engine.deploy.haproxy import BACKENDS, RuntimeAPI
from engine.deploy.targets import HostResult, Target, guarded

HTTP_BACKEND = BACKENDS[0]   # the backend whose sessions are requests (mode http)

Say = Callable[[str, str], None]


@dataclass
class Rollout:
    apis: list[RuntimeAPI]        # one per balancer host: each is told
    behind: list[str]             # the engine hosts behind the balancer
    drain_timeout_s: float        # engine.limits.drain_timeout_s
    up_timeout_s: float           # deploy.health_timeout_s
    say: Say = lambda host, message: None
    # Why the host will apply this release with the engine's SIGHUP reload
    # (same process, its listeners never close: nothing to drain), or None.
    reloads: Callable[[Target], str | None] = lambda target: None

    def parallel(self, wanted: int) -> tuple[int, str | None]:
        """How many hosts may be out at once, and a line to say when that is
        fewer than asked."""
        n = len(self.behind)
        if n == 1:
            return 1, (f"{self.behind[0]} is the only engine host behind the balancer: "
                       "clients get no answer while it restarts")
        if wanted >= n:
            return n - 1, (f"at most {n - 1} of the {n} engine hosts behind the balancer out at once "
                           f"(deploy.parallel {wanted} lowered: never all of them)")
        return wanted, None

    def set_state(self, name: str, state: str) -> None:
        for api in self.apis:
            api.set_state(name, state)

    def wait_drained(self, name: str) -> float | None:
        """Seconds until no HTTP request to the host is left on any balancer;
        None when drain_timeout_s passed first."""
        return self._on_every_balancer(lambda api, left: api.wait_drained(name, left, backends=(HTTP_BACKEND,)),
                                       self.drain_timeout_s)

    def wait_up(self, name: str) -> float | None:
        """Seconds until every balancer sees the host UP; None when
        up_timeout_s passed first."""
        return self._on_every_balancer(lambda api, left: api.wait_status(name, "UP", left), self.up_timeout_s)

    def _on_every_balancer(self, wait: Callable[[RuntimeAPI, float], bool], bound_s: float) -> float | None:
        """wait(api, seconds left) on each balancer in turn, all of them
        within one bound: the seconds it took, or None at the bound."""
        t0 = time.monotonic()
        for api in self.apis:
            if not wait(api, max(0.0, bound_s - (time.monotonic() - t0))):
                return None
        return time.monotonic() - t0

    def step(self, install: Callable[[Target], HostResult]) -> Callable[[Target], HostResult]:
        """`install` wrapped in drain ... ready for the hosts behind the balancer."""

        def one(target: Target) -> HostResult:
            if target.name not in self.behind:
                return install(target)
            why = self.reloads(target)
            if why:
                self.say(target.name, f"config-only release ({why}): reloaded in place, left in the rotation")
                result = install(target)
                if result.ok and result.status != "reloaded":
                    result.warnings.append(f"expected a reload ({why}), the host did {result.status} "
                                           "without being drained")
                return result
            t0 = time.monotonic()
            self.set_state(target.name, "drain")   # raises: nothing changed yet, the host stays as it was
            drained = self.wait_drained(target.name)
            if drained is None:
                self.say(target.name, f"requests still in flight after {self.drain_timeout_s:g} s "
                                      "(engine.limits.drain_timeout_s); the engine's graceful stop finishes them")
            else:
                self.say(target.name, f"drained on the balancer in {drained:.1f} s")
            result = guarded(install, target)
            if drained is None:
                result.warnings.append(f"drain bound hit: requests still in flight after {self.drain_timeout_s:g} s "
                                       "(engine.limits.drain_timeout_s)")
            else:
                result.steps.insert(0, f"drained on the balancer in {drained:.1f} s")
            self._put_back(target, result)
            result.seconds = round(time.monotonic() - t0, 2)
            return result
        return one

    def _put_back(self, target: Target, result: HostResult) -> None:
        state, why = "ready", ""
        if result.status == "unreachable":
            why = "nothing was changed there; its health checks decide"
        elif not result.ok:
            status = guarded(lambda t: t.operate("status"), target)
            if status.ok and status.data.get("health") == "ready" and status.data.get("active"):
                why = f"release {status.data['active']} serves again"
            else:
                state = "maint"
                why = f"no release serves there ({status.data.get('health') or status.reason or 'unknown'})"
        try:
            self.set_state(target.name, state)
        except DeployError as exc:
            result.status = "failed" if result.ok else result.status
            result.reason = _join(result.reason, f"left drained: the balancer could not be told {state}: {exc}")
            return
        if not result.ok:
            where = "ready" if state == "ready" else "in maintenance"
            result.reason = _join(result.reason, f"left {where} on the balancer: {why}")
            return
        up = self.wait_up(target.name)
        if up is None:
            stats = "; ".join(f"{s.backend} {s.status} ({s.check})" for api in self.apis for s in api.server(target.name))
            result.status = "failed"
            result.reason = _join(result.reason, f"serves, but the balancer does not see it UP within "
                                                 f"{self.up_timeout_s:g} s: {stats}")
            return
        result.steps.append(f"ready on the balancer, UP after {up:.1f} s")
        self.say(target.name, f"back in the rotation (UP after {up:.1f} s)")


def _join(reason: str, more: str) -> str:
    return f"{reason}; {more}" if reason else more
