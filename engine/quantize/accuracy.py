"""How far a lower-precision model's outputs are from the fp32 model's, on
the same inputs: the numbers a precision is accepted or refused on."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class AccuracyReport:
    samples: int                     # input rows compared
    max_abs_err: float
    max_rel_err: float               # max |got - ref| / max |ref|, per output, the worst output
    cosine: float                    # the lowest cosine similarity of one sample's output with the reference's
    top1_agreement: float | None     # classifier-shaped outputs only ([N, C], C > 1)

    def lines(self) -> list[str]:
        top1 = "n/a (no classifier-shaped output)" if self.top1_agreement is None else f"{self.top1_agreement:.4f}"
        return [f"compared on {self.samples} sample{'s' if self.samples != 1 else ''}:",
                f"  max abs error   {self.max_abs_err:.3e}",
                f"  max rel error   {self.max_rel_err:.3e}  (|got - fp32| / max |fp32|, worst output)",
                f"  min cosine      {self.cosine:.6f}",
                f"  top-1 agreement {top1}"]

    def as_json(self) -> dict:
        return {"samples": self.samples, "max_abs_err": self.max_abs_err, "max_rel_err": self.max_rel_err,
                "cosine": self.cosine, "top1_agreement": self.top1_agreement}


def limit_problems(acc: AccuracyReport, max_rel_err: float | None, min_top1_agreement: float | None) -> list[str]:
    """What exceeds the limits (None: no limit), one phrase each; [] when within."""
    problems = []
    if max_rel_err is not None and acc.max_rel_err > max_rel_err:
        problems.append(f"max rel error {acc.max_rel_err:.3e} > limit {max_rel_err:.3e}")
    if min_top1_agreement is not None:
        if acc.top1_agreement is None:
            problems.append("a top-1 limit was given but the model has no classifier-shaped output ([N, C])")
        elif acc.top1_agreement < min_top1_agreement:
            problems.append(f"top-1 agreement {acc.top1_agreement:.4f} < limit {min_top1_agreement:.4f}")
    return problems


def compare_outputs(got: list[list[np.ndarray]], ref: list[list[np.ndarray]]) -> AccuracyReport:
    """got/ref: per batch, the model's outputs in order. Floating outputs
    only (an integer output, e.g. an argmax, is compared through top-1)."""
    max_abs = max_rel = 0.0
    cosine, agree, classified, samples = 1.0, 0, 0, 0
    for g_outs, r_outs in zip(got, ref):
        first = np.asarray(r_outs[0])
        samples += int(first.shape[0]) if first.ndim else 1
        for g, r in zip(g_outs, r_outs):
            g, r = np.asarray(g, np.float64), np.asarray(r, np.float64)
            if g.shape != r.shape:
                raise ValueError(f"output shapes differ: {g.shape} vs fp32 {r.shape}")
            if r.size == 0:
                continue
            diff = np.abs(g - r)
            max_abs = max(max_abs, float(diff.max()))
            max_rel = max(max_rel, float(diff.max() / max(float(np.abs(r).max()), 1e-30)))
            rows_g, rows_r = _rows(g), _rows(r)
            norms = np.linalg.norm(rows_g, axis=1) * np.linalg.norm(rows_r, axis=1)
            dots = np.einsum("ij,ij->i", rows_g, rows_r)
            # Two all-zero rows agree exactly; one zero row against a non-zero one is orthogonal.
            cos = np.where(norms > 0, dots / np.where(norms > 0, norms, 1.0),
                           np.where(np.linalg.norm(rows_g, axis=1) == np.linalg.norm(rows_r, axis=1), 1.0, 0.0))
            cosine = min(cosine, float(cos.min()))
            if r.ndim == 2 and r.shape[1] > 1:
                agree += int((g.argmax(1) == r.argmax(1)).sum())
                classified += r.shape[0]
    return AccuracyReport(samples=samples, max_abs_err=max_abs, max_rel_err=max_rel, cosine=cosine,
                          top1_agreement=agree / classified if classified else None)


def _rows(a: np.ndarray) -> np.ndarray:
    """One row per sample (a scalar output is one sample of one value)."""
    return a.reshape(len(a), -1) if a.ndim else a.reshape(1, 1)
