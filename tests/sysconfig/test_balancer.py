"""The balancer section (issue 14): haproxy.cfg and the Prometheus file_sd
list rendered from the spec, accepted by the real `haproxy -c` for any valid
spec, and the cross-key mistakes a fleet spec can make, each one line."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hostspec.loader import load_spec
from hostspec.render import render_tree
from spec_support import in_tmp, problems, write  # noqa: F401 (in_tmp is a fixture)

HAPROXY = shutil.which("haproxy") or next((p for p in ("/usr/sbin/haproxy",) if shutil.os.path.exists(p)), None)
needs_haproxy = pytest.mark.skipif(HAPROXY is None, reason="haproxy is not installed (make sysdeps installs it)")

FLEET = """
    version: 1
    engine:
      listen: 0.0.0.0
    hosts:
      - {name: lb, type: ssh, address: 10.9.0.1, role: balancer}
      - {name: e1, type: ssh, address: 10.9.0.2}
      - {name: e2, type: ssh, address: 10.9.0.3}
    """


def haproxy_check(cfg: bytes, tmp_path) -> subprocess.CompletedProcess:
    path = tmp_path / "haproxy.cfg"
    path.write_bytes(cfg)
    return subprocess.run([HAPROXY, "-c", "-f", str(path)], capture_output=True, text=True, timeout=30)


@needs_haproxy
def test_the_rendered_config_passes_haproxy_check(in_tmp):
    tree = render_tree(load_spec([write(in_tmp, "spec.yaml", FLEET)]))
    result = haproxy_check(tree["etc/haproxy/haproxy.cfg"].content, in_tmp)
    assert result.returncode == 0, result.stdout + result.stderr
    cfg = tree["etc/haproxy/haproxy.cfg"].content.decode()
    assert "server e1 10.9.0.2:8000 check" in cfg and "server e2 10.9.0.3:8001 check port 8000" in cfg
    assert "server lb" not in cfg                       # the balancer is not its own backend


def test_file_sd_lists_every_engine_hosts_metrics(in_tmp):
    spec = write(in_tmp, "spec.yaml", FLEET + """
    balancer:
      engines: [e2]
    """)
    tree = render_tree(load_spec([spec]))
    groups = json.loads(tree["etc/prometheus/file_sd/ai-engine.json"].content)
    # Monitoring follows the whole fleet, not only the hosts this balancer sends traffic to.
    assert groups == [{"labels": {"host": "e1", "job": "ai-engine"}, "targets": ["10.9.0.2:8000"]},
                      {"labels": {"host": "e2", "job": "ai-engine"}, "targets": ["10.9.0.3:8000"]}]
    cfg = tree["etc/haproxy/haproxy.cfg"].content.decode()
    assert "server e2 " in cfg and "server e1 " not in cfg


def test_roles_decide_the_files(in_tmp):
    spec = load_spec([write(in_tmp, "spec.yaml", FLEET)])
    assert "etc/haproxy/haproxy.cfg" not in render_tree(spec, role="engine")
    assert set(render_tree(spec, role="balancer")) == {"etc/haproxy/haproxy.cfg", "etc/prometheus/file_sd/ai-engine.json"}
    assert "etc/haproxy/haproxy.cfg" not in render_tree(load_spec())   # no balancer host: no HAProxy file


@pytest.mark.parametrize("extra, expected", [
    ("""
    hosts:
      - {name: lb, type: ssh, address: 10.9.0.1, role: balancer}
    """, "site.yaml:2: hosts[0].role: a balancer needs engine hosts behind it and the spec has none "
         "(add hosts with role engine (the default role))"),
    ("""
    balancer:
      binary_port: 8080
    """, "site.yaml:2: balancer.binary_port: port 8080 is also balancer.http_port"),
    ("""
    deploy:
      canary: lb
    """, "site.yaml:2: deploy.canary: 'lb' is a balancer host, not an engine host "
         "(a canary runs the new release: name a host with role engine)"),
    ("""
    balancer:
      engines: [e1, lb, nosuch]
    """, ["site.yaml:2: balancer.engines[1]: 'lb' is a balancer host, not an engine host",
          "site.yaml:2: balancer.engines[2]: no host named 'nosuch' in hosts (known engine hosts: e1, e2)"]),
    ("""
    engine:
      listen: 127.0.0.1
    """, "site.yaml:2: engine.listen: the engine listens on 127.0.0.1 only, so the balancer cannot reach engine "
         "hosts e1, e2 (set engine.listen: 0.0.0.0 (and keep the engine ports firewalled to the balancer))"),
    ("""
    engine:
      auth: {enabled: true, secret_file: /etc/ai-engine/secret, open_health: false}
    """, "site.yaml:2: engine.auth.open_health: the balancer's health checks carry no token, so with open_health "
         "false every engine host would be marked down (set engine.auth.open_health: true)"),
])
def test_fleet_mistakes_are_one_line_each(in_tmp, extra, expected):
    site = write(in_tmp, "site.yaml", extra)
    base = write(in_tmp, "spec.yaml", FLEET)
    got = problems(base, site)
    want = [expected] if isinstance(expected, str) else expected
    assert got == want, got


def test_a_local_balancer_and_a_local_engine_cannot_share_a_port(in_tmp):
    spec = write(in_tmp, "spec.yaml", """
    version: 1
    hosts:
      - {name: lb, type: local, root: lbroot, role: balancer}
      - {name: e1, type: local, root: e1root}
    balancer:
      http_port: 8000
    """)
    assert problems(spec) == ["spec.yaml:6: balancer.http_port: port 8000 is also engine.http_port on host 'lb', "
                              "which runs an engine as well (give the balancer's frontends other ports)"]


addresses = st.one_of(st.ip_addresses(v=4).map(str), st.ip_addresses(v=6).map(str),
                      st.from_regex(r"\A[a-z][a-z0-9-]{0,10}(\.[a-z][a-z0-9-]{0,10}){0,2}\Z"))
ports = st.integers(1024, 65535)


@st.composite
def fleets(draw):
    n = draw(st.integers(1, 5))
    http, binary, stats, engine_http, engine_binary = draw(st.lists(ports, min_size=5, max_size=5, unique=True))
    hosts = [{"name": "lb", "type": "ssh", "address": draw(addresses), "role": "balancer"}]
    hosts += [{"name": f"e{i}", "type": "ssh", "address": draw(addresses)} for i in range(n)]
    balancer = {"http_port": http, "binary_port": draw(st.sampled_from([binary, None])),
                "stats_port": draw(st.sampled_from([stats, None])),
                "algorithm": draw(st.sampled_from(["leastconn", "roundrobin", "first", "source"])),
                "server_maxconn": draw(st.integers(0, 5000)), "maxconn": draw(st.integers(1, 100000)),
                "health": {"interval_s": draw(st.sampled_from(["100ms", 1, 2.5, "1min"])),
                           "rise": draw(st.integers(1, 10)), "fall": draw(st.integers(1, 10)),
                           "path": draw(st.sampled_from(["/v2/health/ready", "/health", "/v2/health/live"]))},
                "timeouts": {"connect_s": draw(st.sampled_from([1, "250ms", 5])),
                             "server_s": draw(st.sampled_from([1, 60, "10min"]))}}
    return {"version": 1, "hosts": hosts, "balancer": balancer,
            "engine": {"listen": "0.0.0.0", "http_port": engine_http, "binary_port": engine_binary}}


@needs_haproxy
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(fleet=fleets())
def test_any_valid_fleet_renders_a_config_haproxy_accepts(tmp_path, fleet):
    path = tmp_path / "spec.yaml"
    path.write_text(json.dumps(fleet))          # JSON is YAML
    spec = load_spec([str(path)])
    result = haproxy_check(render_tree(spec, role="balancer")["etc/haproxy/haproxy.cfg"].content, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr + json.dumps(fleet)
