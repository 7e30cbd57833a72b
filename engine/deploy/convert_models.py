"""`invoke convert`: every model of the spec's engine.models converted to
OUT/<name>.aie. Deployer side: the spec is read here, by the deploy layer;
engine.convert only ever sees files (and the precision options read here)."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from hostspec.loader import load_spec

from engine import aie_format
from engine.convert import ConversionSummary, PrecisionOptions, convert_file
from engine.errors import ConversionError, InvalidArgument
from engine.shape_buckets import FIT_HINT, ShapeBuckets, bucket_axes


def precision_options(model: dict) -> PrecisionOptions:
    """The spec's precision keys of one engine.models entry; its sample (the
    deploy smoke input) is what bf16 is measured against fp32 on, else random
    inputs at its shapes. With buckets, max_shapes (else shapes) is planned
    with the bucketed axes at the largest bucket."""
    max_shapes = model.get("max_shapes")
    if model.get("buckets"):
        max_shapes = ShapeBuckets.from_config(model["buckets"]).largest_shapes(max_shapes or model.get("shapes"))
    return PrecisionOptions(model.get("precision", "fp32"), sample=model.get("sample"),
                            max_rel_err=model.get("max_rel_err"), min_top1_agreement=model.get("min_top1_agreement"),
                            shapes=model.get("shapes"), max_shapes=max_shapes)


def check_buckets(model: dict, aie: Path) -> None:
    """Refuse, at conversion, buckets that do not fit the converted model
    (what the engine would refuse to start with: engine.server.buckets);
    the converted file goes with the refusal, so nothing deploys it."""
    if model.get("buckets"):
        try:
            bucket_axes(aie_format.load(aie).graph, ShapeBuckets.from_config(model["buckets"]))
        except InvalidArgument as exc:
            Path(aie).unlink(missing_ok=True)
            raise ConversionError(f"model {model['name']!r}: {exc}", where=f"engine.models[{model['name']}].buckets",
                                  hint=FIT_HINT) from None


def convert_spec_models(spec_paths, out_dir: str | Path, *, progress: Callable[[str], None] | None = None
                        ) -> list[ConversionSummary]:
    """Convert every model in the spec's engine.models to out_dir/<name>.aie.
    A missing source is an error, never a stand-in: build zoo models first
    (`invoke zoo`, which `make deploy` runs for the default spec)."""
    spec = load_spec(spec_paths or None)
    models = spec.data["engine"]["models"]
    for model in models:
        src = Path(model["source"])  # absolute: the spec loader resolved it
        if not src.is_file():
            raise ConversionError(f"model {model['name']!r}: source file not found", where=str(src),
                                  hint=f"fix engine.models[{model['name']}].source in the spec; for a zoo model "
                                       f"run `invoke zoo --name {model['name']}`")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    summaries = []
    for m in models:
        summaries.append(convert_file(Path(m["source"]), out_dir / f"{m['name']}.aie", progress=progress,
                                      precision=precision_options(m)))
        check_buckets(m, out_dir / f"{m['name']}.aie")
    return summaries
