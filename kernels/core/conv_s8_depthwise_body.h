/* The int8 depthwise row kernel (conv_s8_depthwise.h), written once and
 * compiled per ISA (define DWS8_ROWS, then include). Per output pixel the
 * taps inside the image are listed first (padding taps read x_zero: they add
 * nothing), then each block of DWS8_LANES channels sums over that list in a
 * local int32 array the compiler keeps in vector registers (vpmovzxbd /
 * vpmovsxbd / vpmulld with the including file's flags): the taps loop inside,
 * so the sums never go through memory. The int32 arithmetic is exact, so
 * every ISA gives the same sums; the U8 output stage is the int8 GEMM's
 * (aie_gemm_lowp.h): clamp(rint((float)(acc + bias) * m) + y_zero, 0, 255),
 * rint under the default rounding mode (half to even). */
#include <math.h>

#include "aie_gemm_lowp.h"
#include "conv_s8_depthwise.h"

#define DWS8_LANES 16

static inline void DWS8_STORE(const aie_dwconv_s8_args *a, const int32_t *acc, int64_t c0, int64_t len,
                              int64_t out_at) {
    if (a->out == AIE_QOUT_S32) {
        int32_t *y = (int32_t *)a->y + out_at + c0;
        for (int64_t c = 0; c < len; c++) y[c] = acc[c];
        return;
    }
    uint8_t *y = (uint8_t *)a->y + out_at + c0;
    for (int64_t c = 0; c < len; c++) {
        const int32_t sum = acc[c] + (a->bias ? a->bias[c0 + c] : 0);
        float v = rintf((float)sum * a->m[c0 + c]) + (float)a->y_zero;
        v = v < 0.0f ? 0.0f : v;
        v = v > 255.0f ? 255.0f : v;
        y[c] = (uint8_t)v;
    }
}

void DWS8_ROWS(const aie_dwconv_s8_args *a, int64_t row0, int64_t row1) {
    const aie_conv2d_params *p = a->p;
    const int64_t C = p->C;
    const int32_t zx = a->x_zero;
    const uint8_t *xs[AIE_DWS8_MAX_TAPS];
    const int8_t *ws[AIE_DWS8_MAX_TAPS];
    for (int64_t row = row0; row < row1; row++) {
        const int64_t n = row / a->P, oh = row % a->P;
        for (int64_t ow = 0; ow < a->Q; ow++) {
            int nt = 0;
            for (int64_t r = 0; r < p->R; r++) {
                const int64_t ih = oh * p->stride_h - p->pad_top + r * p->dil_h;
                if (ih < 0 || ih >= p->H) continue;
                for (int64_t s = 0; s < p->S; s++) {
                    const int64_t iw = ow * p->stride_w - p->pad_left + s * p->dil_w;
                    if (iw < 0 || iw >= p->W) continue;
                    xs[nt] = a->x + ((n * p->H + ih) * p->W + iw) * C;
                    ws[nt] = a->w + (r * p->S + s) * C;
                    nt++;
                }
            }
            const int64_t out_at = (row * a->Q + ow) * C;
            int64_t c0 = 0;
            for (; c0 + DWS8_LANES <= C; c0 += DWS8_LANES) {
                int32_t acc[DWS8_LANES] = {0};
                for (int t = 0; t < nt; t++) {
                    const uint8_t *xp = xs[t] + c0;
                    const int8_t *wp = ws[t] + c0;
                    for (int c = 0; c < DWS8_LANES; c++) acc[c] += ((int32_t)xp[c] - zx) * wp[c];
                }
                DWS8_STORE(a, acc, c0, DWS8_LANES, out_at);
            }
            if (c0 < C) {
                int32_t acc[DWS8_LANES] = {0};
                for (int t = 0; t < nt; t++)
                    for (int64_t c = 0; c < C - c0; c++) acc[c] += ((int32_t)xs[t][c0 + c] - zx) * ws[t][c0 + c];
                DWS8_STORE(a, acc, c0, C - c0, out_at);
            }
        }
    }
}
