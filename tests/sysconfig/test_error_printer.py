"""One error printer for the CLIs (issue 11 item 4): `ai-engine`,
`python -m hostspec`, the deploy commands and `invoke convert` all print an
error through engine.errors.print_error: one line per problem, `prefix: where:
what (hint)`, and exit with the error's status."""

from __future__ import annotations

import errno

from engine.errors import EngineError, error_lines, exit_status, print_error
from hostspec.__main__ import main as hostspec_main
from hostspec.errors import Problem, SpecError
from hostspec.report import ProvisionError


def test_every_layer_error_is_an_engine_error():
    assert issubclass(SpecError, EngineError) and issubclass(ProvisionError, EngineError)


def test_a_spec_error_prints_one_line_per_problem(capsys):
    exc = SpecError([Problem("spec.yaml", 3, "engine.http_port", "expected an integer, got string 'x'"),
                     Problem("spec.yaml", 9, "host.sysctl", "unknown key", "did you mean 'sysctl'?")])
    assert print_error(exc) == 1
    assert capsys.readouterr().err.splitlines() == [
        "error: spec.yaml:3: engine.http_port: expected an integer, got string 'x'",
        "error: spec.yaml:9: host.sysctl: unknown key (did you mean 'sysctl'?)"]


def test_where_hint_prefix_and_exit_code():
    exc = EngineError("address in use", where="engine.http_port", hint="stop the other server")
    exc.exit_code = 98
    assert error_lines(exc, "ai-engine serve: error") == [
        "ai-engine serve: error: engine.http_port: address in use (stop the other server)"]
    assert exit_status(exc) == 98


def test_an_os_error_names_its_file():
    exc = FileNotFoundError(errno.ENOENT, "No such file or directory", "/etc/ai-engine/engine.yaml")
    assert error_lines(exc) == ["error: /etc/ai-engine/engine.yaml: No such file or directory"]


def test_python_m_hostspec_prints_through_it(tmp_path, capsys):
    spec = tmp_path / "spec.yaml"
    spec.write_text("version: 1\nengine:\n  http_port: eighty\n")
    assert hostspec_main(["provision", "--spec", str(spec), "--root", str(tmp_path / "root"), "--no-live"]) == 1
    assert capsys.readouterr().err.splitlines() == [
        f"error: {spec}:3: engine.http_port: expected an integer, got string 'eighty'"]
