/* The int8 depthwise row kernel (conv_s8_depthwise.h), written once and
 * compiled per ISA (define DWS8_ROWS, then include): int32 sums over blocks
 * of DWS8_BLOCK channels, a fixed trip count the compiler vectorises with the
 * including file's flags (vpmovzxbd / vpmovsxbd / vpmulld). The int32
 * arithmetic is exact, so every ISA gives the same sums; the U8 output stage
 * is the int8 GEMM's (aie_gemm_lowp.h): clamp(rint((float)(acc + bias) *
 * m) + y_zero, 0, 255), rint under the default rounding mode (half to even). */
#include <math.h>

#include "aie_gemm_lowp.h"
#include "conv_s8_depthwise.h"

#define DWS8_BLOCK 64

void DWS8_ROWS(const aie_dwconv_s8_args *a, int64_t row0, int64_t row1) {
    const aie_conv2d_params *p = a->p;
    const int64_t C = p->C;
    for (int64_t row = row0; row < row1; row++) {
        const int64_t n = row / a->P, oh = row % a->P;
        for (int64_t ow = 0; ow < a->Q; ow++) {
            const int64_t out_at = (row * a->Q + ow) * C;
            for (int64_t c0 = 0; c0 < C; c0 += DWS8_BLOCK) {
                const int64_t len = C - c0 < DWS8_BLOCK ? C - c0 : DWS8_BLOCK;
                int32_t acc[DWS8_BLOCK] = {0};
                for (int64_t r = 0; r < p->R; r++) {
                    const int64_t ih = oh * p->stride_h - p->pad_top + r * p->dil_h;
                    if (ih < 0 || ih >= p->H) continue; /* padding reads x_zero: adds nothing */
                    for (int64_t s = 0; s < p->S; s++) {
                        const int64_t iw = ow * p->stride_w - p->pad_left + s * p->dil_w;
                        if (iw < 0 || iw >= p->W) continue;
                        const uint8_t *xp = a->x + ((n * p->H + ih) * p->W + iw) * C + c0;
                        const int8_t *wp = a->w + (r * p->S + s) * C + c0;
                        if (len == DWS8_BLOCK)
                            for (int c = 0; c < DWS8_BLOCK; c++) acc[c] += ((int32_t)xp[c] - a->x_zero) * wp[c];
                        else
                            for (int64_t c = 0; c < len; c++) acc[c] += ((int32_t)xp[c] - a->x_zero) * wp[c];
                    }
                }
                if (a->out == AIE_QOUT_S32) {
                    int32_t *y = (int32_t *)a->y + out_at + c0;
                    for (int64_t c = 0; c < len; c++) y[c] = acc[c];
                    continue;
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
        }
    }
}
