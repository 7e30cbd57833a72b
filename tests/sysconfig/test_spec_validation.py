"""Every invalid-spec case of issue 2: each asserts the exact one-line message,
including the file and line of the offending value."""

from __future__ import annotations

import pytest

from hostspec.errors import Problem, SpecError
from hostspec.loader import load_spec
from spec_support import in_tmp, problems, write  # noqa: F401 (in_tmp is a fixture)


def test_minimal_spec_is_valid_and_gets_every_default(in_tmp):
    spec = load_spec([write(in_tmp, "spec.yaml", "version: 1\n")])
    assert spec.data["host"]["hugepages"] == {"size": 2 << 20, "count": 1024, "headroom": 25, "per_node": {}}
    assert spec.data["service"]["memory_max"] == 4 << 30
    assert spec.data["service"]["restart_sec"] == 10
    assert spec.data["engine"]["limits"]["max_body"] == 64 << 20
    assert spec.data["engine"]["limits"]["max_header_bytes"] == 64 << 10
    assert spec.data["deploy"]["keep_releases"] == 3
    assert spec.warnings == ()


def case(name: str, text: str, *expected: str):
    """One spec.yaml and the exact problems it must get, in order."""
    return pytest.param(text, list(expected), id=name)


ONE_FILE_CASES = [
    case("unknown_key_with_did_you_mean", """
        version: 1
        host:
          hugepages:
            size: 2M
            cout: 512
        """,
         "spec.yaml:5: host.hugepages.cout: unknown key (did you mean 'count'?)"),
    case("unknown_key_without_a_close_match_lists_the_known_keys", """
        version: 1
        deploy:
          zebra: 1
        """,
         "spec.yaml:3: deploy.zebra: unknown key (known keys: canary, command_timeout_s, connect_timeout_s, "
         "health_timeout_s, keep_bundles, keep_releases, known_hosts, max_fail_fraction, parallel, transfer_timeout_s)"),
    case("wrong_type", """
        version: 1
        engine:
          http_port: eighty
          arena:
            mlock: maybe
        """,
         "spec.yaml:3: engine.http_port: expected an integer, got string 'eighty'",
         "spec.yaml:5: engine.arena.mlock: expected true or false, got string 'maybe'"),
    case("wrong_type_of_an_auto_or_number_key", """
        version: 1
        host:
          hugepages:
            count: lots
        """,
         "spec.yaml:4: host.hugepages.count: expected a number of pages (integer >= 0) or 'auto', "
         "got string 'lots'"),
    case("out_of_range_numbers", """
        version: 1
        engine:
          http_port: 70000
          models:
            - name: m
              source: m.onnx
              max_batch_size: 5000
        deploy:
          max_fail_fraction: -0.5
        """,
         "spec.yaml:3: engine.http_port: out of range: 70000 is greater than the maximum 65535",
         "spec.yaml:7: engine.models[0].max_batch_size: out of range: 5000 is greater than the maximum 4096",
         "spec.yaml:9: deploy.max_fail_fraction: out of range: -0.5 is less than the minimum 0"),
    case("bad_enum_value_suggests_the_closest", """
        version: 1
        host:
          transparent_hugepage:
            enabled: madvice
        """,
         "spec.yaml:4: host.transparent_hugepage.enabled: must be one of never, madvise, always; "
         "got madvice (did you mean 'madvise'?)"),
    case("duplicate_yaml_keys", """
        version: 1
        host:
          direct_ip_clients: false
          sysctl:
            vm.swappiness: 1
            vm.swappiness: 10
          direct_ip_clients: true
        """,
         "spec.yaml:6: host.sysctl.vm.swappiness: duplicate key (first defined on line 5) "
         "(YAML keeps only one of them; delete the other)",
         "spec.yaml:7: host.direct_ip_clients: duplicate key (first defined on line 3) "
         "(YAML keeps only one of them; delete the other)"),
    case("empty_file", "# only a comment\n",
         "spec.yaml:1: empty file (a spec starts with 'version: 1')"),
    case("yaml_syntax_error_has_the_line", """
        version: 1
        host:
          sysctl:
            vm.swappiness: 1
           bad: [unclosed
        """,
         "spec.yaml:5:4: YAML syntax error: bad indentation: this line lines up with none of the "
         "keys above it (the mapping from line 3) (keys of one mapping start in the same column; "
         "indent with spaces)"),
    case("every_problem_is_reported_not_just_the_first", """
        version: 1
        host:
          hugepages:
            cout: 1
        service:
          memory_max: lots
          restart: sometimes
        """,
         "spec.yaml:4: host.hugepages.cout: unknown key (did you mean 'count'?)",
         "spec.yaml:6: service.memory_max: expected a size like 512M, 4G or 1.5T (K, M, G, T = 1024-based), "
         "a whole number of bytes, or infinity, got string 'lots'",
         "spec.yaml:7: service.restart: must be one of no, on-success, on-failure, on-abnormal, on-watchdog, "
         "on-abort, always; got sometimes"),
    case("yaml_no_read_as_boolean_gets_a_hint", "version: 1\nservice:\n  restart: no\n",
         "spec.yaml:3: service.restart: must be one of no, on-success, on-failure, on-abnormal, on-watchdog, "
         "on-abort, always; got false (YAML reads yes/no as true/false: quote it, e.g. 'no')"),
    case("invalid_keys_of_free_form_maps", """
        version: 1
        host:
          sysctl:
            Swappiness: 1
          hugepages:
            count: 2
            per_node: {zero: 2}
        """,
         "spec.yaml:4: host.sysctl.Swappiness: invalid key (expected a sysctl name like net.core.somaxconn)",
         "spec.yaml:7: host.hugepages.per_node.zero: invalid key (expected a NUMA node number like 0 or 1)"),
    case("cross_key_checks", """
        version: 1
        host:
          sysctl:
            vm.nr_hugepages: 10
          kernel_cmdline: [hugepages=4, isolcpus=1, isolcpus=2]
          hugepages:
            count: 10
            per_node: {0: 4, 1: 4}
        service:
          cpu_scheduling_policy: fifo
          limit_memlock: 1M
        engine:
          listen: localhost
          arena: {size: 2M, mlock: true}
          models:
            - {name: a, source: a.onnx, max_batch_size: 8, preferred_batch_sizes: [4, 16]}
            - {name: a, source: b.onnx, priority_levels: 2, default_priority: 3}
        hosts:
          - {name: box, type: local, port: 22}
          - {name: far, type: ssh, jump_host: nowhere}
        deploy:
          canary: web1
        """,
         "spec.yaml:4: host.sysctl.vm.nr_hugepages: derived setting; do not set it here "
         "(set host.hugepages.count instead)",
         "spec.yaml:5: host.kernel_cmdline[0]: hugepages= is derived from host.hugepages / host.transparent_hugepage "
         "(set those keys instead)",
         "spec.yaml:5: host.kernel_cmdline[2]: isolcpus given twice (also item 1)",
         "spec.yaml:8: host.hugepages.per_node: node counts add up to 8, not host.hugepages.count 10",
         "spec.yaml:10: service.cpu_scheduling_priority: required with cpu_scheduling_policy fifo "
         "(a realtime priority 1-99)",
         "spec.yaml:11: service.limit_memlock: 1048576 bytes cannot lock engine.arena.size (2097152 bytes) "
         "(raise it or set it to infinity)",
         "spec.yaml:13: engine.listen: not an IP address: 'localhost' (e.g. 127.0.0.1, 0.0.0.0 or ::)",
         "spec.yaml:16: engine.models[0].preferred_batch_sizes[1]: 16 is larger than max_batch_size 8",
         "spec.yaml:17: engine.models[1].name: duplicate model name 'a' (first used on line 16)",
         "spec.yaml:17: engine.models[1].default_priority: 3 is outside 1..priority_levels (2)",
         "spec.yaml:19: hosts[0]: missing required key 'root' (the directory a local host deploys into)",
         "spec.yaml:19: hosts[0].port: only for hosts of type ssh",
         "spec.yaml:20: hosts[1]: missing required key 'address' (the host name or IP address to ssh to)",
         "spec.yaml:20: hosts[1].jump_host: 'nowhere' is neither a host in hosts nor user@host:port",
         "spec.yaml:22: deploy.canary: no host named 'web1' in hosts (known: box, far)"),
]


@pytest.mark.parametrize("text,expected", ONE_FILE_CASES)
def test_one_spec_file_gets_exactly_these_problems(in_tmp, text, expected):
    assert problems(write(in_tmp, "spec.yaml", text)) == expected


def _arena_size_spec(in_tmp, value) -> str:
    return write(in_tmp, "spec.yaml", f"""
        version: 1
        engine:
          arena:
            size: {value}
        """)


@pytest.mark.parametrize("value,expected", [
    ("4X", "bad size '4X' (expected a size like 512M, 4G or 1.5T (K, M, G, T = 1024-based) or a whole number of bytes)"),
    ("1.2.3M", "bad size '1.2.3M' (expected a size like 512M, 4G or 1.5T (K, M, G, T = 1024-based) or a whole number of bytes)"),
    ("-1G", "bad size '-1G' (expected a size like 512M, 4G or 1.5T (K, M, G, T = 1024-based) or a whole number of bytes)"),
    ("0.3K", "bad size '0.3K': not a whole number of bytes (307.2)"),
])
def test_bad_size_strings(in_tmp, value, expected):
    assert problems(_arena_size_spec(in_tmp, value)) == [f"spec.yaml:4: engine.arena.size: {expected}"]


@pytest.mark.parametrize("value,size", [("4G", 4 << 30), ("512M", 512 << 20), ("1.5T", 3 << 39), ("64K", 64 << 10),
                                        (12345, 12345)])
def test_good_size_strings_become_bytes(in_tmp, value, size):
    assert load_spec([_arena_size_spec(in_tmp, value)]).data["engine"]["arena"]["size"] == size


def test_non_mapping_top_level(in_tmp):
    f = write(in_tmp, "spec.yaml", "- version: 1\n- host: {}\n")
    assert problems(f) == ["spec.yaml:1: the top level must be a mapping of sections, got a list "
                           "(expected keys like version, host, service, engine, hosts, deploy)"]
    g = write(in_tmp, "scalar.yaml", "just words\n")
    assert problems(g) == ["scalar.yaml:1: the top level must be a mapping of sections, got the scalar 'just words' "
                           "(expected keys like version, host, service, engine, hosts, deploy)"]


def test_unsupported_version_and_missing_version(in_tmp):
    assert problems(write(in_tmp, "v2.yaml", "version: 2\n")) == [
        "v2.yaml:1: version: unsupported spec version 2 (this ai-engine reads version 1)"]
    assert problems(write(in_tmp, "nov.yaml", "host: {}\n")) == [
        "nov.yaml:1: (top level): missing required key 'version'"]


def test_sysctl_missing_under_proc_sys_is_a_warning_at_load(in_tmp):
    f = write(in_tmp, "spec.yaml", """
        version: 1
        host:
          sysctl:
            vm.swappiness: 1
            net.core.no_such_knob: 7
        """)
    spec = load_spec([f])
    assert [str(w) for w in spec.warnings] == [
        "spec.yaml:5: host.sysctl.net.core.no_such_knob: warning: no such sysctl on this kernel "
        "(/proc/sys/net/core/no_such_knob is missing) (check the spelling, or the module that provides it)"]


def test_missing_file(in_tmp):
    assert problems("nope.yaml") == ["nope.yaml: spec file not found"]


def test_problem_format_without_location():
    assert str(Problem(None, None, "engine.listen", "bad", "hint")) == "engine.listen: bad (hint)"
    assert str(Problem("a.yaml", None, "", "gone")) == "a.yaml: gone"
    assert str(SpecError([Problem("a", 1, "x", "m"), Problem("b", 2, "y", "n")])) == "a:1: x: m\nb:2: y: n"
