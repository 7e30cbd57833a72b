"""Is a started release really serving? Wait for /v2/health/ready, then run
one smoke inference per model and compare it with the reference output the
deployer recorded when it converted the model (models/<name>.smoke.json in
the bundle).

Host side: stdlib only (urllib, json); also used by the deployer to check a
host over the network.
"""

from __future__ import annotations

import json
import math
import time
import urllib.error
import urllib.request
from typing import Callable

from engine.deploy import DeployError

# Requests made while polling must not outlive the poll interval by much.
REQUEST_TIMEOUT_S = 5.0
POLL_INTERVAL_S = 0.2


def http_json(method: str, url: str, body: dict | None = None, timeout_s: float = REQUEST_TIMEOUT_S,
              token: str | None = None) -> tuple[int, dict]:
    """(status, decoded JSON or {}) for one request, with a bearer token when
    given; raises OSError when nothing answers."""
    data = None if body is None else json.dumps(body).encode()
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {token}"} if token else {})}
    req = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            status, raw = resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        status, raw = exc.code, exc.read()
    try:
        return status, json.loads(raw) if raw else {}
    except ValueError:
        return status, {"error": raw[:200].decode(errors="replace")}


def wait_ready(base_url: str, timeout_s: float, alive: Callable[[], bool] | None = None,
               token: str | None = None) -> float:
    """Poll GET /v2/health/ready until 200; return the seconds it took. Fails
    early when `alive()` says the process is gone (its log has the reason)."""
    start = time.monotonic()
    last = "no answer"
    while True:
        try:
            status, _ = http_json("GET", f"{base_url}/v2/health/ready", timeout_s=min(REQUEST_TIMEOUT_S, timeout_s),
                                  token=token)
            if status == 200:
                return time.monotonic() - start
            last = f"HTTP {status}"
        except OSError as exc:
            last = str(getattr(exc, "reason", exc))
        if alive is not None and not alive():
            raise DeployError("the engine exited before it became ready", where=base_url)
        if time.monotonic() - start > timeout_s:
            raise DeployError(f"not ready after {timeout_s:g} s (last answer: {last})", where=f"{base_url}/v2/health/ready",
                              hint="raise deploy.health_timeout_s or read the engine log (invoke logs)")
        time.sleep(POLL_INTERVAL_S)  # the server offers no push notification of readiness


def _flat(values) -> list:
    out = []
    stack = [values]
    while stack:
        v = stack.pop()
        if isinstance(v, list):
            stack.extend(reversed(v))
        else:
            out.append(v)
    return out


def compare(name: str, got: list, want: list, rtol: float, atol: float) -> str | None:
    """None when every element is close (numpy.allclose semantics), else why not."""
    got, want = _flat(got), _flat(want)
    if len(got) != len(want):
        return f"output {name!r}: {len(got)} values, expected {len(want)}"
    worst, where = 0.0, -1
    for i, (g, w) in enumerate(zip(got, want)):
        if not isinstance(g, (int, float)) or isinstance(g, bool):
            return f"output {name!r}[{i}]: {g!r} is not a number"
        excess = abs(g - w) - (atol + rtol * abs(w))
        if math.isnan(g) or excess > worst:
            worst, where = (math.inf if math.isnan(g) else excess), i
    if where >= 0:
        return (f"output {name!r}[{where}] = {got[where]!r}, reference {want[where]!r} "
                f"(rtol {rtol:g}, atol {atol:g})")
    return None


def smoke(base_url: str, reference: dict, token: str | None = None) -> dict:
    """POST the reference inputs to the model and compare every output.
    Returns the response's outputs; raises DeployError with the difference."""
    model = reference["model"]
    url = f"{base_url}/v2/models/{model}/infer"
    body = {"inputs": [{k: t[k] for k in ("name", "shape", "datatype", "data")} for t in reference["inputs"]]}
    try:
        status, answer = http_json("POST", url, body, timeout_s=30.0, token=token)
    except OSError as exc:
        raise DeployError(f"smoke inference got no answer: {getattr(exc, 'reason', exc)}", where=url) from None
    if status != 200:
        raise DeployError(f"smoke inference answered HTTP {status}: {answer.get('error', answer)}", where=url)
    outputs = {o.get("name"): o for o in answer.get("outputs", [])}
    for want in reference["outputs"]:
        got = outputs.get(want["name"])
        if got is None:
            raise DeployError(f"smoke inference: output {want['name']!r} missing (got {sorted(outputs)})", where=url)
        if list(got.get("shape", [])) != list(want["shape"]):
            raise DeployError(f"smoke inference: output {want['name']!r} has shape {got.get('shape')}, "
                              f"reference {want['shape']}", where=url)
        diff = compare(want["name"], got.get("data", []), want["data"], reference["rtol"], reference["atol"])
        if diff:
            raise DeployError(f"smoke inference does not match the converter's reference: {diff}", where=url)
    return outputs
