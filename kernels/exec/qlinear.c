/* int8 executor ops: the fused QDQ groups (engine/passes/qdq_fuse.py) on the
 * int8 GEMM and convolution (aie_gemm_lowp.h, aie_conv_s8.h).
 * t: y, x (u8), packed weights, w_scale (f32, one per output channel), bias
 * (NULL, or f32 for F32 outputs, int32 for U8 outputs), workspace; the conv
 * then optionally a per-channel uint8 table (aie_qepilogue.lut_u8). */
#include "exec_ops.h"

static aie_qepilogue qepilogue(int64_t out, int64_t y_zero, int64_t act, const aie_step_args *a,
                               aie_epilogue *ep) {
    *ep = (aie_epilogue){out == AIE_QOUT_F32 ? a->t[4] : NULL, out == AIE_QOUT_F32 && a->t[4] ? AIE_BIAS_COL
                                                                                               : AIE_BIAS_NONE,
                         (int)act, (float)a->fp[2], (float)a->fp[3]};
    return (aie_qepilogue){.out = (int32_t)out, .a_scale = (float)a->fp[0], .b_scale = a->t[3],
                           .y_scale = (float)a->fp[1], .y_zero = (int32_t)y_zero,
                           .bias_s32 = out == AIE_QOUT_U8 ? a->t[4] : NULL, .ep = ep};
}

int aie_x_gemm_u8s8_packed(const aie_step_args *a) {
    const aie_gemm_u8s8_step *sp = (const aie_gemm_u8s8_step *)(const void *)a->ip;
    aie_epilogue ep;
    aie_qepilogue q = qepilogue(sp->out, sp->y_zero, sp->act, a, &ep);
    return aie_gemm_u8s8(sp->M, sp->N, sp->K, a->t[1], sp->K, (int32_t)sp->a_zero, a->t[2], a->t[0], sp->N, &q,
                         a->t[5], (size_t)sp->workspace_bytes, a->nthreads);
}

int aie_x_conv_u8s8(const aie_step_args *a) {
    const aie_conv_u8s8_step *sp = (const aie_conv_u8s8_step *)(const void *)a->ip;
    aie_epilogue ep;
    aie_qepilogue q = qepilogue(sp->out, sp->y_zero, sp->act, a, &ep);
    if (a->nt > 6) q.lut_u8 = a->t[6];
    return aie_conv2d_u8s8(&sp->conv, a->t[1], (int32_t)sp->x_zero, a->t[2], a->t[0], &q, a->t[5],
                           (size_t)sp->workspace_bytes, a->nthreads);
}

/* Depthwise: t[2] is the R x S x C int8 weights, t[5] the multipliers' workspace. */
int aie_x_conv_u8s8_dw(const aie_step_args *a) {
    const aie_conv_u8s8_step *sp = (const aie_conv_u8s8_step *)(const void *)a->ip;
    aie_epilogue ep;
    aie_qepilogue q = qepilogue(sp->out, sp->y_zero, sp->act, a, &ep);
    return aie_conv2d_u8s8_depthwise(&sp->conv, a->t[1], (int32_t)sp->x_zero, a->t[2], a->t[0], &q, a->t[5],
                                     (size_t)sp->workspace_bytes, a->nthreads);
}

/* QuantizeLinear / DequantizeLinear per tensor, one pass each, with the
 * operations engine/ops/quantize.py composes (so the same values):
 * dequantise (float(x) - float(zero)) * scale; quantise x / scale rounded half
 * to even, plus the zero point, saturated to the type. Like the composed path
 * (and onnx.reference), which converts to int32 before adding the zero point,
 * a quotient that is NaN or >= 2^31 (int32's "indefinite" INT_MIN) gives the
 * type's low end. */

/* 1.5 * 2^23: adding and subtracting it rounds |y| < 2^22 to an integer,
 * half to even; y is clamped to +-512 first, past which every zero point
 * saturates anyway. no-trapping-math: lets gcc vectorise the clamps. */
#define QROUND_MAGIC 12582912.0f

__attribute__((optimize("no-trapping-math"))) static void quantize_row(const float *restrict x, int64_t n,
                                                                       float scale, float zero, float lo, float hi,
                                                                       int is_signed, void *restrict out) {
    uint8_t *restrict u = out;
    int8_t *restrict s = out;
    for (int64_t i = 0; i < n; i++) {
        float y = x[i] / scale;
        y = y < 2147483648.0f ? y : -512.0f; /* NaN too */
        y = y > 512.0f ? 512.0f : y;
        y = y < -512.0f ? -512.0f : y;
        float t = ((y + QROUND_MAGIC) - QROUND_MAGIC) + zero;
        t = t >= lo ? t : lo;
        t = t > hi ? hi : t;
        if (is_signed) s[i] = (int8_t)t;
        else u[i] = (uint8_t)t;
    }
}

int aie_x_quantize(const aie_step_args *a) {
    const aie_qcast_step *sp = (const aie_qcast_step *)(const void *)a->ip;
    const int is_signed = sp->dtype == AIE_DT_I8;
    quantize_row(a->t[1], sp->n, (float)a->fp[0], (float)sp->zero, is_signed ? -128.0f : 0.0f,
                 is_signed ? 127.0f : 255.0f, is_signed, a->t[0]);
    return AIE_OK;
}

int aie_x_dequantize(const aie_step_args *a) {
    const aie_qcast_step *sp = (const aie_qcast_step *)(const void *)a->ip;
    const float scale = (float)a->fp[0], zero = (float)sp->zero;
    float *restrict y = a->t[0];
    const int64_t n = sp->n;
    if (sp->dtype == AIE_DT_U8) {
        const uint8_t *restrict x = a->t[1];
        for (int64_t i = 0; i < n; i++) y[i] = ((float)x[i] - zero) * scale;
    } else if (sp->dtype == AIE_DT_I8) {
        const int8_t *restrict x = a->t[1];
        for (int64_t i = 0; i < n; i++) y[i] = ((float)x[i] - zero) * scale;
    } else {
        const int32_t *restrict x = a->t[1];
        for (int64_t i = 0; i < n; i++) y[i] = ((float)x[i] - zero) * scale;
    }
    return AIE_OK;
}

/* t: y (u8), x (u8), lut (channels x 256 u8): a uint8 -> uint8 map per
 * channel (engine/passes/qdq_fuse.py tabulates DequantizeLinear ->
 * BatchNormalization [-> Relu] -> QuantizeLinear with the fp32 operations of
 * those steps, so the bytes are theirs). */
int aie_x_lut_u8(const aie_step_args *a) {
    const aie_lut_step *sp = (const aie_lut_step *)(const void *)a->ip;
    uint8_t *restrict y = a->t[0];
    const uint8_t *restrict x = a->t[1], *lut = a->t[2];
    const int64_t n = sp->n, inner = sp->inner, channels = sp->channels;
    if (inner == 1) {
        for (int64_t i = 0; i < n; i += channels)
            for (int64_t c = 0; c < channels; c++) y[i + c] = lut[c * 256 + x[i + c]];
        return AIE_OK;
    }
    for (int64_t i = 0; i < n; i += inner) {
        const uint8_t *t = lut + ((i / inner) % channels) * 256;
        for (int64_t k = 0; k < inner; k++) y[i + k] = t[x[i + k]];
    }
    return AIE_OK;
}
