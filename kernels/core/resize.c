/*
 * 2-D resize (ONNX Resize, nearest and linear, 4 coordinate transforms) of
 * float32 NCHW or NHWC images. Source coordinates are computed in double
 * exactly as the ONNX reference writes them, then clamped to the image (the
 * reference pads with edge values, which is the same thing).
 */
#include <math.h>

#include "aie_layout.h"
#include "vmath.h"

typedef struct {
    const float *x;
    float *y;
    int layout, mode, coord, nearest;
    int64_t n, c, h, w, oh, ow, ntasks;
    double sh, sw;
} resize_ctx;

static double source_coord(int coord, int64_t i, double scale, int64_t in, int64_t out) {
    switch (coord) {
    case AIE_COORD_ASYMMETRIC: return (double)i / scale;
    case AIE_COORD_ALIGN_CORNERS: {
        double len = scale * (double)in; /* the reference's output_width, not `out` */
        return len == 1.0 ? 0.0 : (double)i * (double)(in - 1) / (len - 1.0);
    }
    case AIE_COORD_PYTORCH_HALF_PIXEL: return out > 1 ? ((double)i + 0.5) / scale - 0.5 : 0.0;
    default: return ((double)i + 0.5) / scale - 0.5;
    }
}

static int64_t clamp_index(int64_t i, int64_t n) { return i < 0 ? 0 : (i >= n ? n - 1 : i); }

static int64_t nearest_index(int mode, double v, int64_t n) {
    double r;
    switch (mode) {
    case AIE_NEAREST_ROUND_PREFER_CEIL: r = floor(v + 0.5); break;
    case AIE_NEAREST_FLOOR: r = floor(v); break;
    case AIE_NEAREST_CEIL: r = ceil(v); break;
    default: r = ceil(v - 0.5); break; /* round, ties to the floor */
    }
    return clamp_index((int64_t)r, n);
}

/* Linear: the two neighbours and the weight of the second. */
static void linear_taps(double v, int64_t n, int64_t *i0, int64_t *i1, float *frac) {
    if (v < 0) v = 0;
    if (v > (double)(n - 1)) v = (double)(n - 1);
    double f = floor(v);
    *i0 = (int64_t)f;
    *i1 = *i0 + 1 < n ? *i0 + 1 : n - 1;
    *frac = (float)(v - f);
}

/* One unit = one output row (image b, output row oy) over all channels. */
static void resize_task(void *vctx, int64_t t, int64_t nt) {
    const resize_ctx *c = vctx;
    int64_t lo, hi;
    aie_ops_chunk(c->n * c->oh, t, c->ntasks, &lo, &hi);
    int nhwc = c->layout == AIE_LAYOUT_NHWC;
    /* element (b, ch, yy, xx) of an image with rows of `width` pixels */
#define AT(base, b, ch, yy, xx, height, width) \
    (base)[nhwc ? (((b) * (height) + (yy)) * (width) + (xx)) * c->c + (ch) \
                : (((b) * c->c + (ch)) * (height) + (yy)) * (width) + (xx)]
    for (int64_t u = lo; u < hi; u++) {
        int64_t b = u / c->oh, oy = u % c->oh;
        double sy = source_coord(c->coord, oy, c->sh, c->h, c->oh);
        if (c->mode == AIE_RESIZE_NEAREST) {
            int64_t iy = nearest_index(c->nearest, sy, c->h);
            for (int64_t ox = 0; ox < c->ow; ox++) {
                int64_t ix = nearest_index(c->nearest, source_coord(c->coord, ox, c->sw, c->w, c->ow), c->w);
                for (int64_t ch = 0; ch < c->c; ch++) AT(c->y, b, ch, oy, ox, c->oh, c->ow) = AT(c->x, b, ch, iy, ix, c->h, c->w);
            }
        } else {
            int64_t y0, y1, x0, x1;
            float fy, fx;
            linear_taps(sy, c->h, &y0, &y1, &fy);
            for (int64_t ox = 0; ox < c->ow; ox++) {
                linear_taps(source_coord(c->coord, ox, c->sw, c->w, c->ow), c->w, &x0, &x1, &fx);
                for (int64_t ch = 0; ch < c->c; ch++) {
                    float top = AT(c->x, b, ch, y0, x0, c->h, c->w) * (1.0f - fx) + AT(c->x, b, ch, y0, x1, c->h, c->w) * fx;
                    float bot = AT(c->x, b, ch, y1, x0, c->h, c->w) * (1.0f - fx) + AT(c->x, b, ch, y1, x1, c->h, c->w) * fx;
                    AT(c->y, b, ch, oy, ox, c->oh, c->ow) = top * (1.0f - fy) + bot * fy;
                }
            }
        }
    }
#undef AT
}

int aie_resize2d(const float *x, float *y, int layout, int64_t n, int64_t c, int64_t h, int64_t w, int64_t oh,
                 int64_t ow, double scale_h, double scale_w, int mode, int coord_mode, int nearest_mode, int nthreads) {
    aie_ensure_init();
    if (layout != AIE_LAYOUT_NCHW && layout != AIE_LAYOUT_NHWC)
        return aie_fail(AIE_EINVAL, "resize2d: layout %d (expected NCHW 0 or NHWC 1)", layout);
    if (mode != AIE_RESIZE_NEAREST && mode != AIE_RESIZE_LINEAR)
        return aie_fail(AIE_EINVAL, "resize2d: mode %d (expected nearest 0 or linear 1)", mode);
    if (coord_mode < AIE_COORD_HALF_PIXEL || coord_mode > AIE_COORD_PYTORCH_HALF_PIXEL)
        return aie_fail(AIE_EINVAL, "resize2d: coordinate transformation mode %d unknown", coord_mode);
    if (nearest_mode < AIE_NEAREST_ROUND_PREFER_FLOOR || nearest_mode > AIE_NEAREST_CEIL)
        return aie_fail(AIE_EINVAL, "resize2d: nearest mode %d unknown", nearest_mode);
    if (n < 0 || c < 0 || h < 0 || w < 0 || oh < 0 || ow < 0) return aie_fail(AIE_EINVAL, "resize2d: negative dims");
    if (n * c * oh * ow == 0) return AIE_OK;
    if (h == 0 || w == 0) return aie_fail(AIE_EINVAL, "resize2d: empty input image (%lld x %lld)", (long long)h, (long long)w);
    if (!(scale_h > 0.0) || !(scale_w > 0.0))
        return aie_fail(AIE_EINVAL, "resize2d: scales must be > 0 (got %g, %g)", scale_h, scale_w);
    if (!x || !y) return aie_fail(AIE_EINVAL, "resize2d: NULL tensor pointer");
    resize_ctx ctx = {.x = x, .y = y, .layout = layout, .mode = mode, .coord = coord_mode, .nearest = nearest_mode,
                      .n = n, .c = c, .h = h, .w = w, .oh = oh, .ow = ow, .sh = scale_h, .sw = scale_w};
    ctx.ntasks = aie_ops_tasks(n * oh, ow * c * (mode == AIE_RESIZE_LINEAR ? 4 : 1), nthreads);
    aie_parallel_for(ctx.ntasks, aie_ops_threads(nthreads), resize_task, &ctx);
    return AIE_OK;
}
