"""YAML syntax errors in plain words at file:line:col, empty overlays, and
sysctl values the kernel can read (issue 10 item 11)."""

from __future__ import annotations

import pytest

from hostspec.loader import load_spec
from spec_support import in_tmp, problems, write  # noqa: F401 (in_tmp is a fixture)


@pytest.mark.parametrize("text,expected", [
    ("version: 1\nhost:\n\tsysctl: {}\n",
     "s.yaml:3:1: YAML syntax error: a tab character (YAML indents with spaces only; replace the tab with spaces)"),
    ('version: 1\nengine:\n  listen: "127.0.0.1\n  http_port: 8000\n',
     "s.yaml:3:11: YAML syntax error: unclosed quote: this string never ends (add the closing quote on the same line)"),
    ("version: 1\nhost:\n  sysctl:\n    vm.swappiness: 1\n   vm.max_map_count: 2\n",
     "s.yaml:5:4: YAML syntax error: bad indentation: this line lines up with none of the keys above it (the mapping "
     "from line 3) (keys of one mapping start in the same column; indent with spaces)"),
    ("version: 1\nengine:\n  listen: x\n    http_port: 8000\n",
     "s.yaml:4:14: YAML syntax error: unexpected ':' (a key cannot start in the middle of a value) (check the "
     "indentation of this line, or quote a value that contains ': ')"),
    ("version: 1\nhost:\n  kernel_cmdline: [a, b\nservice: {}\n",
     "s.yaml:3:19: YAML syntax error: unclosed '[': no matching ']' before line 4 (close it with ']', or write the "
     "items one per line)"),
    ("version: 1\nhost\nservice: {}\n",
     "s.yaml:2:1: YAML syntax error: a line that is not 'key: value' (write key, colon, space, value; or indent it "
     "under a key)"),
    ("version: 1\nhosts:\n  sysctl: 1\n  - a\n",
     "s.yaml:4:3: YAML syntax error: a list item ('- ') where a key was expected (indent the list under its key, or "
     "make every item of the list a '- ' line)"),
    ("version: 1\nservice: {user: @me}\n",
     "s.yaml:2:17: YAML syntax error: a value cannot start with '@' (quote the value, e.g. \"@...\")"),
], ids=["tab", "unclosed-quote", "indentation", "colon-in-value", "unclosed-bracket", "no-colon", "list-in-map", "at"])
def test_yaml_syntax_errors_in_plain_words(in_tmp, text, expected):
    (in_tmp / "s.yaml").write_text(text)
    assert problems("s.yaml") == [expected]


def test_an_empty_or_comment_only_overlay_changes_nothing(in_tmp):
    base = write(in_tmp, "base.yaml", "version: 1\nengine: {http_port: 9000, binary_port: 9001}\n")
    write(in_tmp, "empty.yaml", "")
    write(in_tmp, "comments.yaml", "# nothing overridden for this site yet\n")
    spec = load_spec([base, "empty.yaml", "comments.yaml"])
    assert spec.data == load_spec([base]).data and spec.data["engine"]["http_port"] == 9000


def test_the_first_file_still_needs_version(in_tmp):
    write(in_tmp, "empty.yaml", "")
    write(in_tmp, "site.yaml", "version: 1\n")
    write(in_tmp, "noversion.yaml", "engine: {http_port: 9000, binary_port: 9001}\n")
    assert problems("empty.yaml", "site.yaml") == ["empty.yaml:1: empty file (a spec starts with 'version: 1')"]
    assert problems("noversion.yaml", "site.yaml") == [
        "noversion.yaml:1: version: missing in the first spec file "
        "(the first file starts with 'version: 1'; overlays may omit it)"]


@pytest.mark.parametrize("key,value,expected", [
    ("net.core.somaxconn", '"a lot"', "expected an integer, got string 'a lot'"),
    ("net.core.somaxconn", "lots", "expected an integer, got string 'lots'"),
    ("net.ipv4.ip_local_port_range", '"1024"', "expected 2 integers separated by spaces, got string '1024'"),
    ("net.ipv4.tcp_rmem", '"4096 lots 6291456"', "expected 3 integers separated by spaces, got string '4096 lots 6291456'"),
    ("net.ipv4.tcp_congestion_control", '"bbr please"',
     "expected an integer, integers separated by spaces (e.g. '32768 60999') or one word (e.g. bbr), "
     "got string 'bbr please'"),
])
def test_sysctl_values_the_kernel_cannot_read_are_rejected(in_tmp, key, value, expected):
    write(in_tmp, "s.yaml", f"version: 1\nhost:\n  sysctl:\n    {key}: {value}\n")
    assert problems("s.yaml") == [f"s.yaml:4: host.sysctl.{key}: {expected}"]


def test_sysctl_values_in_the_kernels_forms_are_accepted(in_tmp):
    write(in_tmp, "s.yaml", """
        version: 1
        host:
          sysctl:
            net.core.somaxconn: 4096
            vm.swappiness: "10"
            net.ipv4.ip_local_port_range: "32768   60999"
            net.ipv4.tcp_rmem: 4096 87380 6291456
            net.ipv4.tcp_congestion_control: bbr
            net.core.default_qdisc: fq
            kernel.core_pattern: "|/usr/lib/systemd/systemd-coredump %P %u %g %s %t"
        """)
    sysctl = load_spec(["s.yaml"]).data["host"]["sysctl"]
    assert sysctl["net.ipv4.tcp_rmem"] == "4096 87380 6291456" and sysctl["net.core.somaxconn"] == 4096
