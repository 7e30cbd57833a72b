"""A synthetic handwriting-like digits data set, rendered from a built-in font.

Each sample is a 28x28 float32 image in [0, 1] (white digit on black, like
MNIST): a 5x7 bitmap glyph is smoothed into strokes of random thickness,
then warped by a random affine map (scale, rotation, shear, shift), dimmed
and overlaid with noise. Everything comes from one seeded numpy Generator, so
a seed names a data set exactly.
"""

from __future__ import annotations

import numpy as np

SIDE = 28          # MNIST's image size
GLYPH_H, GLYPH_W = 7, 5
UPSAMPLE = 8       # glyph cells -> pixels of the high-resolution master

# The classic 5x7 dot-matrix digits (as on HD44780 LCD controllers).
_FONT = {
    0: ("01110", "10001", "10011", "10101", "11001", "10001", "01110"),
    1: ("00100", "01100", "00100", "00100", "00100", "00100", "01110"),
    2: ("01110", "10001", "00001", "00010", "00100", "01000", "11111"),
    3: ("11111", "00010", "00100", "00010", "00001", "10001", "01110"),
    4: ("00010", "00110", "01010", "10010", "11111", "00010", "00010"),
    5: ("11111", "10000", "11110", "00001", "00001", "10001", "01110"),
    6: ("00110", "01000", "10000", "11110", "10001", "10001", "01110"),
    7: ("11111", "00001", "00010", "00100", "01000", "01000", "01000"),
    8: ("01110", "10001", "10001", "01110", "10001", "10001", "01110"),
    9: ("01110", "10001", "10001", "01111", "00001", "00010", "01100"),
}
# Stroke thresholds on the blurred master: lower = thicker strokes.
_THICKNESS = (0.22, 0.35, 0.5)


def _box_blur(img: np.ndarray, radius: int) -> np.ndarray:
    """Separable box blur (edge-padded): rounds the glyph's square corners."""
    k = 2 * radius + 1
    for axis in (0, 1):
        pad = [(radius, radius) if a == axis else (0, 0) for a in range(2)]
        c = np.cumsum(np.pad(img, pad, mode="edge"), axis=axis, dtype=np.float64)
        c = np.concatenate([np.zeros_like(c.take([0], axis=axis)), c], axis=axis)
        img = (c.take(range(k, c.shape[axis]), axis=axis) - c.take(range(0, c.shape[axis] - k), axis=axis)) / k
    return img


def masters() -> np.ndarray:
    """[10, len(_THICKNESS), 56 + 2m, 40 + 2m] smooth high-resolution glyphs, margin m."""
    margin = UPSAMPLE
    out = []
    for digit in range(10):
        bits = np.array([[c == "1" for c in row] for row in _FONT[digit]], dtype=np.float64)
        big = np.pad(np.kron(bits, np.ones((UPSAMPLE, UPSAMPLE))), margin)
        blurred = _box_blur(_box_blur(big, 3), 3)
        out.append([np.clip((blurred - t) / 0.2, 0.0, 1.0) for t in _THICKNESS])
    return np.asarray(out, dtype=np.float32)


def render(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """n samples: images float32 [n, 1, 28, 28] in [0, 1] and labels int64 [n]."""
    rng = np.random.default_rng(seed)
    src = masters()
    _, _, mh, mw = src.shape
    labels = rng.integers(0, 10, n)
    thickness = rng.integers(0, len(_THICKNESS), n)

    # Output pixel -> master pixel: inverse of (scale . rotate . shear) around the
    # centres, plus a shift. The glyph's 7 cells span ~20 px at scale 1 (MNIST's 20x20 box).
    scale = (GLYPH_H * UPSAMPLE / 20.0) / rng.uniform(0.75, 1.1, n)
    angle = np.deg2rad(rng.uniform(-12, 12, n))
    shear = rng.uniform(-0.25, 0.25, n)
    shift = rng.uniform(-3.0, 3.0, (n, 2))
    cos, sin = np.cos(angle), np.sin(angle)
    a11, a12 = scale * cos, scale * (-sin + shear * cos)
    a21, a22 = scale * sin, scale * (cos + shear * sin)

    ys, xs = np.mgrid[0:SIDE, 0:SIDE].astype(np.float64)
    dy = ys.ravel()[None, :] - (SIDE - 1) / 2 - shift[:, :1]
    dx = xs.ravel()[None, :] - (SIDE - 1) / 2 - shift[:, 1:]
    sy = a11[:, None] * dy + a12[:, None] * dx + (mh - 1) / 2
    sx = a21[:, None] * dy + a22[:, None] * dx + (mw - 1) / 2

    # Bilinear sampling, zero outside the master.
    y0, x0 = np.floor(sy).astype(np.int64), np.floor(sx).astype(np.int64)
    fy, fx = (sy - y0).astype(np.float32), (sx - x0).astype(np.float32)
    flat = src.reshape(10 * len(_THICKNESS), mh * mw)
    rows = (labels * len(_THICKNESS) + thickness)[:, None]

    def tap(yy: np.ndarray, xx: np.ndarray) -> np.ndarray:
        inside = (yy >= 0) & (yy < mh) & (xx >= 0) & (xx < mw)
        idx = np.clip(yy, 0, mh - 1) * mw + np.clip(xx, 0, mw - 1)
        return np.where(inside, flat[rows, idx], 0.0)

    img = ((1 - fy) * (1 - fx) * tap(y0, x0) + (1 - fy) * fx * tap(y0, x0 + 1)
           + fy * (1 - fx) * tap(y0 + 1, x0) + fy * fx * tap(y0 + 1, x0 + 1))
    img = img * rng.uniform(0.7, 1.0, (n, 1)) + rng.normal(0.0, 0.08, img.shape)
    images = np.clip(img, 0.0, 1.0).astype(np.float32).reshape(n, 1, SIDE, SIDE)
    return images, labels.astype(np.int64)


def ascii_art(image: np.ndarray) -> str:
    """A 28x28 image as text (for humans checking what a sample looks like)."""
    shades = " .:-=+*#%@"
    img = np.asarray(image, dtype=np.float32).reshape(SIDE, SIDE)
    return "\n".join("".join(shades[min(9, int(v * 10))] for v in row) for row in img)
