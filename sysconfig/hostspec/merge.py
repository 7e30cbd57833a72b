"""Layer spec files: maps merge deeply in order (later wins), anything else —
lists included — is replaced whole. The line map is merged alongside, so a
merged value still points at the file and line that set it."""

from __future__ import annotations

from hostspec.yamlsource import KeyPath, Origins

_MISSING = object()


def deep_merge(base: object, over: object) -> object:
    if isinstance(base, dict) and isinstance(over, dict):
        merged = dict(base)
        for key, value in over.items():
            merged[key] = deep_merge(base[key], value) if key in base else value
        return merged
    return over


def _origins(value: object, path: KeyPath, base: object, over: object,
             base_origins: Origins, over_origins: Origins, out: Origins) -> None:
    source = over_origins if over is not _MISSING else base_origins
    if path in source:
        out[path] = source[path]
    if isinstance(value, dict):
        for key, child in value.items():
            b = base.get(key, _MISSING) if isinstance(base, dict) else _MISSING
            o = over.get(key, _MISSING) if isinstance(over, dict) else _MISSING
            if o is not _MISSING and not (isinstance(o, dict) and isinstance(b, dict)):
                b = _MISSING  # replaced whole: nothing below comes from base any more
            _origins(child, path + (key,), b, o, base_origins, over_origins, out)
    elif isinstance(value, list):
        for i, child in enumerate(value):
            sub_base = base if over is _MISSING else _MISSING
            sub_over = over if over is not _MISSING else _MISSING
            _origins(child, path + (i,), _index(sub_base, i), _index(sub_over, i), base_origins, over_origins, out)


def _index(seq: object, i: int) -> object:
    return seq[i] if isinstance(seq, list) and i < len(seq) else _MISSING


def merge_layers(layers: list[tuple[object, Origins]]) -> tuple[object, Origins]:
    """Fold [(data, origins), ...] left to right."""
    data, origins = layers[0]
    for over, over_origins in layers[1:]:
        merged = deep_merge(data, over)
        out: Origins = {}
        _origins(merged, (), data, over, origins, over_origins, out)
        out[()] = origins.get((), over_origins.get(()))
        data, origins = merged, out
    return data, origins
