/* Convolution and pooling executor ops: thin adapters from step parameters
 * to the library's NHWC kernels (aie_conv.h, aie_pool.h). The converter lays
 * conv/pool chains out in NHWC and packs constant weights once; a weight
 * computed at run time is packed by a CONV_PACK step into the arena first.
 *
 * Conv-family steps carry the 18 int64 fields of aie_conv2d_params in struct
 * order at the start of ip (N, H, W, C, K, R, S, stride_h, stride_w, dil_h,
 * dil_w, pad_top, pad_left, pad_bottom, pad_right, groups, out_pad_h,
 * out_pad_w), so they are copied, not re-parsed. */
#include "exec_ops.h"

#include <string.h>

#define CONV_PARAM_WORDS 18
_Static_assert(sizeof(aie_conv2d_params) == CONV_PARAM_WORDS * sizeof(int64_t),
               "aie_conv2d_params must be 18 int64 fields");

static void conv_params(aie_conv2d_params *p, const int64_t *ip) { memcpy(p, ip, sizeof *p); }

int aie_x_conv(const aie_step_args *a) {
    aie_conv2d_params p;
    conv_params(&p, a->ip);
    const int64_t *ip = a->ip + CONV_PARAM_WORDS;
    aie_epilogue ep = {NULL, AIE_BIAS_NONE, (int)ip[0], (float)a->fp[0], (float)a->fp[1]};
    const float *x = a->t[1], *res = a->t[4];
    float *y = a->t[0];
    int rc = aie_conv2d(&p, x, a->t[2], a->t[3], res, &ep, y, a->t[5], (size_t)ip[1], a->nthreads);
    if (rc != AIE_ENOMEM || p.N == 1) return rc;
    /* Workaround: aie_conv2d sizes its per-tile GEMM workspace for a full
     * im2col tile, but aie_sgemm_workspace_size is not monotonic in M, so the
     * last, shorter tile can need more (e.g. N=3, 16x16x32 -> 64, 3x3, pad 1,
     * 1 thread: M=313 needs 185536 bytes, 174016 given). Image by image the
     * tiling differs; the residual is never y here (the planner gives y its
     * own buffer), so recomputing from scratch is exact. */
    int64_t P, Q;
    if (aie_conv2d_output_shape(&p, &P, &Q) != AIE_OK) return rc;
    aie_conv2d_params one = p;
    one.N = 1;
    const int64_t xs = p.H * p.W * p.C, ys = P * Q * p.K;
    for (int64_t n = 0; n < p.N; n++) {
        rc = aie_conv2d(&one, x + n * xs, a->t[2], a->t[3], res ? res + n * ys : NULL, &ep, y + n * ys, a->t[5],
                        (size_t)ip[1], a->nthreads);
        if (rc != AIE_OK) return rc;
    }
    return AIE_OK;
}

int aie_x_conv_transpose(const aie_step_args *a) {
    aie_conv2d_params p;
    conv_params(&p, a->ip);
    const int64_t *ip = a->ip + CONV_PARAM_WORDS;
    aie_epilogue ep = {NULL, AIE_BIAS_NONE, (int)ip[0], (float)a->fp[0], (float)a->fp[1]};
    return aie_conv_transpose2d(&p, a->t[1], a->t[2], a->t[3], &ep, a->t[0], a->t[4], (size_t)ip[1], a->nthreads);
}

/* t: packed (out), w. ip: params, transposed (0 Conv, 1 ConvTranspose), packed bytes.
 * Packing may allocate a temporary: this step only exists for weights that
 * are not constants (never on a converted zoo model's path). */
int aie_x_conv_pack(const aie_step_args *a) {
    aie_conv2d_params p;
    conv_params(&p, a->ip);
    const int64_t *ip = a->ip + CONV_PARAM_WORDS;
    if (ip[0]) return aie_conv_transpose2d_pack_weights(&p, a->t[1], a->t[0], (size_t)ip[1]);
    return aie_conv2d_pack_weights(&p, a->t[1], a->t[0], (size_t)ip[1]);
}

/* t: y, x. ip: kind, N, H, W, C, kh, kw, stride_h, stride_w, dil_h, dil_w,
 * pad_top, pad_left, pad_bottom, pad_right, ceil_mode, count_include_pad. */
int aie_x_pool(const aie_step_args *a) {
    const int64_t *ip = a->ip;
    aie_pool2d_params p = {ip[1], ip[2], ip[3], ip[4], ip[5], ip[6], ip[7], ip[8], ip[9], ip[10],
                           ip[11], ip[12], ip[13], ip[14], (int32_t)ip[15], (int32_t)ip[16]};
    return aie_pool2d((int)ip[0], &p, a->t[1], a->t[0], a->nthreads);
}

/* t: y [N, C], x [N, HW, C]. ip: kind, N, HW, C. */
int aie_x_global_pool(const aie_step_args *a) {
    return aie_global_pool((int)a->ip[0], a->ip[1], a->ip[2], a->ip[3], a->t[1], a->t[0], a->nthreads);
}
