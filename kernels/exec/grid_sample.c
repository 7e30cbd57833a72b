/* GridSample over 2-D images (NCHW x, grid [N, OH, OW, 2] of (x, y) in
 * [-1, 1]), float32, following onnx.reference's GridSample step by step:
 * denormalise, round (nearest: half to even), fold out-of-range coordinates
 * by the padding mode, then separable nearest / linear / cubic (Keys,
 * a = -0.75) taps whose indices are padded the same way. */
#include "exec_ops.h"

#include <math.h>

enum { GS_NEAREST = 0, GS_LINEAR = 1, GS_CUBIC = 2 };
enum { GS_ZEROS = 0, GS_BORDER = 1, GS_REFLECTION = 2 };

static double gs_denormalize(double n, int64_t len, int64_t align) {
    return align ? (n + 1) / 2.0 * (double)(len - 1) : ((n + 1) * (double)len - 1) / 2.0;
}

/* Reflect by the nearer border until inside [lo, hi]. */
static double gs_reflect(double x, double lo, double hi) {
    double rng = hi - lo;
    if (x < lo) {
        double dx = lo - x;
        int64_t n = (int64_t)(dx / rng);
        double r = dx - (double)n * rng;
        return n % 2 == 0 ? lo + r : hi - r;
    }
    if (x > hi) {
        double dx = x - hi;
        int64_t n = (int64_t)(dx / rng);
        double r = dx - (double)n * rng;
        return n % 2 == 0 ? hi - r : lo + r;
    }
    return x;
}

/* Index i along a dim of `len` under the padding mode; -1 reads as zero. */
static int64_t gs_index(int64_t i, int64_t len, int64_t pad, double lo, double hi) {
    if (pad == GS_ZEROS) return (i >= 0 && i < len) ? i : -1;
    if (pad == GS_BORDER) return i < 0 ? 0 : (i > len - 1 ? len - 1 : i);
    return (int64_t)gs_reflect((double)i, lo, hi);
}

static void gs_cubic_coeffs(double x, double c[4]) {
    const double a = -0.75;
    x = fabs(x);
    c[0] = ((a * (x + 1) - 5 * a) * (x + 1) + 8 * a) * (x + 1) - 4 * a;
    c[1] = ((a + 2) * x - (a + 3)) * x * x + 1;
    c[2] = ((a + 2) * (1 - x) - (a + 3)) * (1 - x) * (1 - x) + 1;
    c[3] = ((a * (2 - x) - 5 * a) * (2 - x) + 8 * a) * (2 - x) - 4 * a;
}

/* Taps of one coordinate: indices (padded) and weights; returns the count. */
static int gs_taps(double x, int64_t mode, int64_t len, int64_t pad, double lo, double hi, int64_t idx[4],
                   double w[4]) {
    double f = floor(x);
    int64_t x0 = (int64_t)f;
    if (mode == GS_LINEAR) {
        double t = x - f;
        w[0] = 1 - t;
        w[1] = t;
        for (int k = 0; k < 2; k++) idx[k] = gs_index(x0 + k, len, pad, lo, hi);
        return 2;
    }
    gs_cubic_coeffs(x - f, w);
    for (int k = 0; k < 4; k++) idx[k] = gs_index(x0 - 1 + k, len, pad, lo, hi);
    return 4;
}

int aie_x_grid_sample(const aie_step_args *a) {
    const aie_grid_sample_step *sp = (const aie_grid_sample_step *)(const void *)a->ip;
    int64_t N = sp->N, C = sp->C, H = sp->H, W = sp->W, OH = sp->OH, OW = sp->OW;
    int64_t mode = sp->mode, pad = sp->padding, align = sp->align_corners;
    float *y = a->t[0];
    const float *x = a->t[1], *grid = a->t[2];
    const int64_t dims[2] = {H, W};
    double lo[2], hi[2];
    for (int d = 0; d < 2; d++) {
        lo[d] = align ? 0.0 : -0.5;
        hi[d] = align ? (double)dims[d] - 1.0 : (double)dims[d] - 0.5;
    }
    for (int64_t n = 0; n < N; n++)
        for (int64_t p = 0; p < OH * OW; p++) {
            const float *g = grid + (n * OH * OW + p) * 2;
            double c[2];
            for (int d = 0; d < 2; d++) {
                /* grid holds (x, y): dim 0 (rows) reads g[1]; stored as float32 as in the reference */
                float v = (float)gs_denormalize(g[1 - d], dims[d], align);
                if (mode == GS_NEAREST) v = rintf(v);
                double vd = v;
                if (vd < lo[d] || vd > hi[d]) {
                    if (pad == GS_BORDER) vd = vd < 0 ? 0 : (vd > (double)(dims[d] - 1) ? (double)(dims[d] - 1) : vd);
                    else if (pad == GS_REFLECTION) vd = gs_reflect(vd, lo[d], hi[d]);
                }
                c[d] = (float)vd;
            }
            for (int64_t ch = 0; ch < C; ch++) {
                const float *img = x + (n * C + ch) * H * W;
                double acc = 0.0;
                if (mode == GS_NEAREST) {
                    int64_t r = gs_index((int64_t)c[0], H, pad, lo[0], hi[0]);
                    int64_t q = gs_index((int64_t)c[1], W, pad, lo[1], hi[1]);
                    acc = (r < 0 || q < 0) ? 0.0 : img[r * W + q];
                } else {
                    int64_t ri[4], qi[4];
                    double rw[4], qw[4];
                    int nr = gs_taps(c[0], mode, H, pad, lo[0], hi[0], ri, rw);
                    int nq = gs_taps(c[1], mode, W, pad, lo[1], hi[1], qi, qw);
                    for (int i = 0; i < nr; i++) {
                        if (ri[i] < 0) continue;
                        double row = 0.0;
                        for (int j = 0; j < nq; j++)
                            if (qi[j] >= 0) row += qw[j] * img[ri[i] * W + qi[j]];
                        acc += rw[i] * row;
                    }
                }
                y[(n * C + ch) * OH * OW + p] = (float)acc;
            }
        }
    return AIE_OK;
}
