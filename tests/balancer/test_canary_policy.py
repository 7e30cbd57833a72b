"""The canary's pure parts on numbers (issue 14 item 4): the spec's
deploy.canary forms and their cross-key checks, HAProxy weights for a
share, the figures read from an engine's real /metrics text, the p99 of a
histogram against a float64 reference, and the judgement of a step."""

from __future__ import annotations

import numpy as np
import pytest

from engine.deploy.canary import (Counts, Policy, failed_early, fleet_ramp, judge, parse_counts, quantile,
                                  share_weights)
from engine.deploy.haproxy import RuntimeAPI
from engine.server.metrics import LATENCY_BUCKETS, Metrics
from spec_support import in_tmp, problems, write  # noqa: F401 (in_tmp is a fixture)
from test_balancer import FLEET     # tests/sysconfig's fleet spec: a balancer, engines e1 and e2

POLICY = Policy("e1", (1, 5, 25, 50, 100), 60.0, 200, 0.01, 1.2)


# ---- the spec ---------------------------------------------------------------------------

def test_the_host_name_is_short_for_the_defaults_and_the_object_fills_the_rest(in_tmp):
    from hostspec.loader import load_spec

    base = write(in_tmp, "spec.yaml", FLEET)
    short = load_spec([base, write(in_tmp, "a.yaml", "deploy: {canary: e1}")])
    assert Policy.from_spec(short.data["deploy"]["canary"]) == POLICY
    full = load_spec([base, write(in_tmp, "b.yaml", "deploy: {canary: {host: e2, steps: [10, 100], step_s: 2min}}")])
    assert Policy.from_spec(full.data["deploy"]["canary"]) == Policy("e2", (10, 100), 120.0, 200, 0.01, 1.2)
    assert Policy.from_spec(load_spec([base]).data["deploy"]["canary"]) is None


@pytest.mark.parametrize("site, expected", [
    ("deploy: {canary: {host: e1, steps: [5, 5, 100]}}",
     ["b.yaml:1: deploy.canary.steps[1]: 5 after 5: the steps must increase (e.g. [1, 5, 25, 50, 100])"]),
    ("deploy: {canary: {host: e1, steps: [5, 50]}}",
     ["b.yaml:1: deploy.canary.steps[1]: the last step is 50, not 100 (the ramp ends with the canary taking all "
      "the traffic: end the steps with 100)"]),
    ("deploy: {canary: {host: e1, steps: [0, 101]}}",
     ["b.yaml:1: deploy.canary.steps[0]: out of range: 0 is less than the minimum 1",
      "b.yaml:1: deploy.canary.steps[1]: out of range: 101 is greater than the maximum 100"]),
    ("deploy: {canary: {host: lb}}",
     ["b.yaml:1: deploy.canary.host: 'lb' is a balancer host, not an engine host (a canary runs the new release: "
      "name a host with role engine)"]),
    ("deploy: {canary: {host: e9}}", ["b.yaml:1: deploy.canary.host: no host named 'e9' in hosts (known: e1, e2, lb)"]),
    ("deploy: {canary: {steps: [100]}}", ["b.yaml:1: deploy.canary: missing required key 'host'"]),
    ("deploy: {canary: {host: e1, stepz: [100]}}", ["b.yaml:1: deploy.canary.stepz: unknown key (did you mean 'steps'?)"]),
    ("deploy: {canary: 3}",
     ["b.yaml:1: deploy.canary: expected a host name, {host: NAME, steps: [...], ...} or null, got number 3"]),
    ("balancer: {engines: [e2]}\ndeploy: {canary: {host: e1}}",
     ["b.yaml:2: deploy.canary.host: 'e1' is not behind the balancer (balancer.engines) (add it to balancer.engines)"]),
    ("balancer: {engines: [e1]}\ndeploy: {canary: {host: e1}}",
     ["b.yaml:2: deploy.canary.host: 'e1' is the only engine host behind the balancer: there is no fleet to "
      "compare it with (add engine hosts, or write deploy.canary: e1 to deploy it alone first)"]),
])
def test_canary_mistakes_are_one_line_each(in_tmp, site, expected):
    assert problems(write(in_tmp, "spec.yaml", FLEET), write(in_tmp, "b.yaml", site)) == expected


def test_a_ramp_without_a_balancer_is_refused_and_the_host_name_alone_is_not(in_tmp):
    from hostspec.loader import load_spec

    spec = write(in_tmp, "spec.yaml", """
    version: 1
    hosts:
      - {name: e1, type: ssh, address: 10.9.0.2}
      - {name: e2, type: ssh, address: 10.9.0.3}
    deploy:
      canary: {host: e1}
    """)
    assert problems(spec) == [
        "spec.yaml:6: deploy.canary: a canary with a traffic ramp (steps, limits) needs a balancer host "
        "(hosts[].role: balancer) to weigh its traffic, and the spec has none (add a balancer host, or write "
        "deploy.canary: e1 to deploy it alone first)"]
    (in_tmp / "spec.yaml").write_text((in_tmp / "spec.yaml").read_text().replace("{host: e1}", "e1"))
    assert load_spec([spec]).data["deploy"]["canary"] == "e1"     # deployed alone first, as before


def test_a_ramp_only_for_a_canary_behind_the_balancer(in_tmp):
    from hostspec.loader import load_spec

    base = write(in_tmp, "spec.yaml", FLEET)
    said = []
    say = lambda host, line: said.append(f"{host}: {line}")  # noqa: E731
    assert fleet_ramp(load_spec([base]), {"engine": {}}, say, in_tmp) is None                 # no canary
    # A balancer reached over SSH: the pipeline hands over its runtime API client (balancer_host).
    spec = load_spec([base, write(in_tmp, "a.yaml", "deploy: {canary: e1}")])
    assert callable(fleet_ramp(spec, {"engine": {}}, say, in_tmp, api=RuntimeAPI(str(in_tmp / "admin.sock"))))
    assert said == []


# ---- weights ----------------------------------------------------------------------------

@pytest.mark.parametrize("others", [1, 2, 3, 7])
@pytest.mark.parametrize("percent", [1, 5, 25, 50, 75, 100])
def test_weights_give_the_share(percent, others):
    canary, other = share_weights(percent, others)
    assert 1 <= canary <= 256 and 0 <= other <= 256
    assert abs(100 * canary / (canary + others * other) - percent) < 0.05 * percent


def test_weights_out_of_reach_come_as_near_as_haproxy_allows():
    assert share_weights(100, 4) == (256, 0)
    assert share_weights(99, 5) == (256, 1)              # 98.1%: 99% needs a canary weight of 495
    with pytest.raises(ValueError, match="1..100 percent"):
        share_weights(0, 2)


def test_set_weight_refuses_what_haproxy_cannot_take():
    api = RuntimeAPI("/nonexistent/admin.sock")     # refused before any command is sent
    for bad in (-1, 257, 1.5, True, "5"):
        with pytest.raises(ValueError, match="0..256"):
            api.set_weight("e1", bad)


# ---- figures ------------------------------------------------------------------------------

def _metrics_text(requests: dict, latencies: dict) -> str:
    """What a real engine's /metrics says (engine.server.metrics renders it)."""
    m = Metrics()
    for (model, protocol, code), n in requests.items():
        for _ in range(n):
            m.count_request(model, protocol, code, latencies.get(model, 1e-3))
    return m.render(queue_depth={}, load_errors={}, arena={}, uptime_s=1.0)


def test_parse_counts_reads_inference_answers_and_server_errors():
    text = _metrics_text({("mlp", "http", 200): 90, ("mlp", "http", 500): 3, ("mlp", "binary", 200): 5,
                          ("mlp", "http", 400): 2, ("", "http-meta", 404): 4, ("cnn", "binary", 503): 1},
                         {"mlp": 2e-3, "cnn": 0.3})
    c = parse_counts(text)
    assert (c.answers, c.errors) == (90 + 3 + 5 + 2 + 1, 3 + 1)   # a 400 is the client's; metadata is no inference
    assert c.bounds == LATENCY_BUCKETS + (float("inf"),)
    assert c.buckets[-1] == 101                                    # both models' histograms summed
    later = parse_counts(_metrics_text({("mlp", "http", 200): 100, ("mlp", "http", 500): 3, ("mlp", "binary", 200): 5,
                                        ("mlp", "http", 400): 2, ("cnn", "binary", 503): 1}, {"mlp": 2e-3, "cnn": 0.3}))
    step = later.minus(c)
    assert (step.answers, step.errors, step.buckets[-1]) == (10, 0, 10)


def test_p99_of_the_histogram_matches_the_samples():
    rng = np.random.default_rng(3)
    for scale in (2e-4, 3e-3, 0.08):
        samples = rng.lognormal(np.log(scale), 0.6, 997)
        bounds = LATENCY_BUCKETS + (float("inf"),)
        cumulative = tuple(int(np.sum(samples <= b)) for b in bounds)
        p99 = quantile(0.99, bounds, cumulative)
        exact = float(np.quantile(samples.astype(np.float64), 0.99))
        # Interpolated inside one bucket: it lies in the bucket the exact value lies in.
        i = next(k for k, b in enumerate(bounds) if exact <= b)
        assert (bounds[i - 1] if i else 0.0) <= p99 <= bounds[i], (scale, p99, exact)
    assert quantile(0.99, (0.1, float("inf")), (0, 0)) is None
    assert quantile(0.99, (0.1, float("inf")), (0, 5)) == 0.1      # beyond the last bound: the last bound


# ---- the judgement ---------------------------------------------------------------------------

def _counts(answers: int, errors: int, latency_s: float) -> Counts:
    bounds = LATENCY_BUCKETS + (float("inf"),)
    return Counts(answers, errors, bounds, tuple(answers if latency_s <= b else 0 for b in bounds))


def test_judge_widens_a_good_step():
    assert judge(POLICY, _counts(200, 2, 1e-3), fleet_p99_s=1e-3) == ""          # 1.00% is within 1%


def test_judge_names_the_figure_the_limit_and_the_measure():
    assert judge(POLICY, _counts(200, 3, 1e-3), 1e-3) == \
        "error rate 1.50% (3 of 200) is above max_error_rate 1.00%"
    why = judge(POLICY, _counts(250, 0, 9e-3), fleet_p99_s=1e-3)
    assert why.startswith("p99 9.9") and why.endswith("x the fleet's 1.00 ms, above max_p99_ratio 1.2")
    assert judge(POLICY, _counts(37, 0, 1e-3), 1e-3) == \
        "only 37 requests in 60 s, fewer than min_requests 200: not enough evidence to widen"
    assert judge(POLICY, _counts(37, 30, 1e-3), 1e-3).startswith("error rate 81.08%")   # errors before evidence


def test_without_a_fleet_reference_the_p99_rule_cannot_fail():
    assert judge(POLICY, _counts(200, 0, 5.0), fleet_p99_s=None) == ""


def test_a_step_fails_early_once_min_requests_could_not_hold_the_errors():
    assert not failed_early(POLICY, _counts(10, 2, 1e-3))     # 2 of the 200 allowed
    assert failed_early(POLICY, _counts(10, 3, 1e-3))         # 3 > 1% of 200 whatever follows
