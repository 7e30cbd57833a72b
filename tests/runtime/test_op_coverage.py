"""Every op in the registry (engine.ops.supported_ops) has a test: an op
added without one fails here, by name.

An op counts as tested when a correct case of the pinned ONNX node suite
runs it (onnx_node_suite_baseline.json records their op types), when a test
calls check_op (tests/runtime/op_oracle.py) with its name, or when a test
is marked `@pytest.mark.op_test("Op", ...)` (for ops only the converter
creates, such as the fused ones). The test files are read, not imported, so
this takes milliseconds."""

from __future__ import annotations

import ast
import json
from pathlib import Path

from engine.ops import supported_ops

TESTS = Path(__file__).resolve().parents[1]
BASELINE = Path(__file__).with_name("onnx_node_suite_baseline.json")


def _names_in(tree: ast.AST) -> set[str]:
    """Op names given to check_op(tmp_path, "Op", ...) and to op_test(...) markers."""
    names = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        called = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        if called == "check_op" and len(node.args) > 1:
            args = node.args[1:2]
        elif called == "op_test":
            args = node.args
        else:
            continue
        names.update(a.value for a in args if isinstance(a, ast.Constant) and isinstance(a.value, str))
    return names


def ops_under_test() -> dict[str, str]:
    """op -> where its test is (the first place found)."""
    found = {op: BASELINE.name for op in json.loads(BASELINE.read_text())["ops"]}
    for path in sorted(TESTS.rglob("test_*.py")):
        for op in _names_in(ast.parse(path.read_text(), str(path))):
            found.setdefault(op, str(path.relative_to(TESTS)))
    return found


def test_every_registered_op_has_a_test():
    untested = sorted(set(supported_ops()) - set(ops_under_test()))
    assert not untested, (f"{len(untested)} registered ops have no test: {', '.join(untested)}; add a check_op test "
                          "(tests/runtime/op_oracle.py) or mark the test that covers one @pytest.mark.op_test(\"Op\")")


def test_the_scan_finds_check_op_calls_and_markers():
    tree = ast.parse('check_op(tmp_path, "Celu", {})\n@pytest.mark.op_test("FusedX", "FusedY")\ndef t(): pass\n'
                     'check_op(tmp_path, op, {})\n')
    assert _names_in(tree) == {"Celu", "FusedX", "FusedY"}
