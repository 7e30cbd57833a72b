"""engine.server.jsoncodec: orjson on the request path, the stdlib behind it
for the JSON that Python clients write but orjson refuses, and NaN/Infinity
outputs written as the stdlib writes them (never as null)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from engine.server import jsoncodec


def test_round_trip_matches_the_stdlib():
    doc = {"inputs": [{"name": "x", "shape": [2, 3], "datatype": "FP32",
                       "data": np.random.default_rng(0).standard_normal(6).astype(np.float32).tolist()}],
           "id": "é-☃", "parameters": {"priority": 2, "flag": True, "none": None}}
    text = json.dumps(doc).encode()
    assert jsoncodec.loads(text) == json.loads(text)
    assert jsoncodec.loads(memoryview(text)) == json.loads(text)
    assert json.loads(jsoncodec.dumps(doc)) == doc


def test_what_orjson_refuses_goes_to_the_stdlib():
    text = b'{"data": [NaN, Infinity, -Infinity, 1], "big": 123456789012345678901234567890}'
    doc = jsoncodec.loads(text)
    assert math.isnan(doc["data"][0]) and doc["data"][1:] == [math.inf, -math.inf, 1]
    assert doc["big"] == 123456789012345678901234567890
    with pytest.raises(ValueError):
        jsoncodec.loads(b'{"inputs": [1, 2')


def test_non_finite_outputs_are_written_as_the_stdlib_does():
    doc = {"data": [float("nan"), float("inf"), 1.5]}
    assert jsoncodec.dumps(doc, finite=False) == b'{"data":[NaN,Infinity,1.5]}'
