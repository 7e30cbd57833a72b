"""The smoke input a deploy verifies with: engine.models[].sample (a .npy or
.npz file) or .shapes for a model with symbolic dimensions; with neither, a
one-line error naming the model, the input, its dims and the key to add."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml

from engine.convert import convert_file
from engine.deploy import DeployError, commands
from engine.deploy.pipeline import Options
from engine.deploy.reference import write_reference
from tests.deploy.conftest import REPO


@pytest.fixture(scope="module")
def mlp(zoo, tmp_path_factory):
    """The zoo's mlp (input [N, 784]: a symbolic batch dim) converted once."""
    src = zoo("mlp")
    aie = tmp_path_factory.mktemp("mlp") / "mlp.aie"
    convert_file(src, aie)
    return src, aie


def test_a_symbolic_dim_without_sample_or_shapes_says_what_to_add(mlp, tmp_path):
    src, aie = mlp
    with pytest.raises(DeployError) as err:
        write_reference("mlp", aie, src, tmp_path / "mlp.smoke.json")
    text = str(err.value)
    assert "\n" not in text
    assert text.startswith("engine.models[mlp]: model 'mlp': input 'input' has symbolic dims [N, 784]"), text
    assert "add shapes: {input: [...]}" in text and "sample: <file.npy|.npz>" in text
    assert not (tmp_path / "mlp.smoke.json").exists()


def test_shapes_give_the_smoke_input(mlp, tmp_path):
    src, aie = mlp
    doc = write_reference("mlp", aie, src, tmp_path / "mlp.smoke.json", shapes={"input": [3, 784]})
    assert doc["inputs"][0]["shape"] == [3, 784] and doc["outputs"][0]["shape"] == [3, 10]
    assert json.loads((tmp_path / "mlp.smoke.json").read_text()) == doc
    with pytest.raises(DeployError, match=r"shape \[3, 785\] does not fit input 'input' with dims \[N, 784\]"):
        write_reference("mlp", aie, src, tmp_path / "x.json", shapes={"input": [3, 785]})
    with pytest.raises(DeployError, match="model 'mlp' has no input 'image'"):
        write_reference("mlp", aie, src, tmp_path / "x.json", shapes={"image": [1, 784]})


def test_sample_files_npy_and_npz_with_labels(mlp, tmp_path):
    src, aie = mlp
    rows = np.random.default_rng(1).standard_normal((2, 784)).astype(np.float32)
    np.save(tmp_path / "rows.npy", rows)
    (tmp_path / "rows.json").write_text(json.dumps({"labels": [4, 2]}))
    doc = write_reference("mlp", aie, src, tmp_path / "a.json", sample=tmp_path / "rows.npy")
    assert doc["inputs"][0]["shape"] == [2, 784] and doc["labels"] == [4, 2]
    np.savez(tmp_path / "rows.npz", input=rows)
    assert write_reference("mlp", aie, src, tmp_path / "b.json", sample=tmp_path / "rows.npz")["inputs"] == doc["inputs"]
    np.savez(tmp_path / "wrong.npz", image=rows)
    with pytest.raises(DeployError, match=r"the \.npz holds arrays \['image'\], the model's inputs are \['input'\]"):
        write_reference("mlp", aie, src, tmp_path / "c.json", sample=tmp_path / "wrong.npz")
    (tmp_path / "junk.npy").write_bytes(b"not numpy")
    with pytest.raises(DeployError, match="cannot read the sample"):
        write_reference("mlp", aie, src, tmp_path / "d.json", sample=tmp_path / "junk.npy")


def test_the_deploy_reports_a_symbolic_model_in_one_line(zoo, tmp_path, kernels_lib, capsys):
    """Through the pipeline (what `invoke deploy`/`bundle` run): the convert
    step's line is printed, then one error line, no traceback."""
    site = tmp_path / "site.yaml"
    site.write_text(yaml.safe_dump({"engine": {"models": [{"name": "mlp", "source": str(zoo("mlp"))}]}}))
    rc = commands.bundle(Options(specs=[REPO / "sysconfig" / "spec.yaml", site], build_dir=tmp_path / "build",
                                 lib_dir=kernels_lib))
    captured = capsys.readouterr()
    assert rc == 1
    assert captured.err.strip().splitlines() == [
        "error: engine.models[mlp]: model 'mlp': input 'input' has symbolic dims [N, 784]; the smoke input needs "
        "concrete ones (add shapes: {input: [...]} (a list of ints) or sample: <file.npy|.npz>)"], captured.err
    assert "Traceback" not in captured.out + captured.err

    site.write_text(yaml.safe_dump({"engine": {"models": [{"name": "mlp", "source": str(zoo("mlp")),
                                                           "shapes": {"input": [2, 784]}}]}}))
    from engine.deploy.pipeline import Pipeline
    from engine.deploy.report import Reporter

    pipeline = Pipeline(Options(specs=[REPO / "sysconfig" / "spec.yaml", site], build_dir=tmp_path / "build",
                                lib_dir=kernels_lib), Reporter(quiet=True))
    models = pipeline.models(pipeline.kernels()["so"])
    assert json.loads(models["mlp"][1].read_text())["inputs"][0]["shape"] == [2, 784]
