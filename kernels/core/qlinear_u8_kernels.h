/* Internal: the per-ISA loops of the uint8 QOperator/QDQ steps QMATMUL_U8
 * (exec/qmatmul_u8.c) and QADD_U8 (exec/qadd_u8.c), one set per ISA
 * (scalar/, avx2/ qlinear_u8_*.c): QADD's loop is written once
 * (core/qadd_u8_body.h) and compiled by both; QMATMUL's portable loop
 * (core/qmatmul_u8_body.h) is scalar's, avx2 has a vpmaddwd kernel of its
 * own. The dispatch table (kernel_table.h) names the set a level runs.
 * The drivers validate the step, fill a job and hand the set's task to the
 * thread pool.
 * Every set gives the same bytes: QMATMUL's sums are exact int32 and its
 * requantisation one float32 multiply; QADD's fmaf is correctly rounded in
 * libm (scalar) and in vfmadd (avx2) alike, and ISO C mode (-std=c17)
 * contracts nothing else into an FMA. */
#ifndef AIE_QLINEAR_U8_KERNELS_H
#define AIE_QLINEAR_U8_KERNELS_H

#include <stdint.h>

/* 1.5 * 2^23: (v + magic) - magic rounds |v| < 2^22 half to even without a libm call. */
#define AIE_QROUND_MAGIC 12582912.0f
/* Rows of one matrix per QMATMUL_U8 task. */
#define AIE_QMM_ROWS 8
/* Elements per QADD_U8 task. */
#define AIE_QADD_CHUNK 16384

/* QMATMUL_U8: y (batch x m x n) from a (batch x m x k), b ([batch x] k x n),
 * one int32 row of n per pool participant in ws (the portable loop's accumulators);
 * mult = float32(sa * sb) / sy. */
typedef struct {
    uint8_t *y;
    const uint8_t *a, *b;
    int32_t *ws;
    float mult;
    int64_t m, n, k, b_stride, row_blocks;
    int32_t za, zb, zy;
} aie_qmm_job;

/* QADD_U8 (the forms: exec/qadd_u8.c): y[i] from a[i % pa], b[i % pb]. */
typedef struct {
    uint8_t *y;
    const uint8_t *a, *b;
    float sa, sb, sy, za, zb, zy, lo;
    float rac, rbc, fixed; /* forms 1 and 2 */
    int64_t n, pa, pb;
    int form;
} aie_qadd_job;

/* QMATMUL_U8's requantisation (onnxruntime's): float32(acc) * mult, rounded half to even, + zy, saturated;
 * clamped to +-512 before the rounding, where every zero point saturates. */
static inline uint8_t aie_qmm_requant(int32_t acc, float mult, float zy) {
    float v = (float)acc * mult;
    v = v > 512.0f ? 512.0f : v;
    v = v < -512.0f ? -512.0f : v;
    v = ((v + AIE_QROUND_MAGIC) - AIE_QROUND_MAGIC) + zy;
    v = v >= 0.0f ? v : 0.0f;
    return (uint8_t)(v > 255.0f ? 255.0f : v);
}

/* A thread-pool task (threadpool.h's signature): ctx is the job. */
typedef void aie_q8_task_fn(void *ctx, int64_t task, int worker);

typedef struct {
    const char *name;
    aie_q8_task_fn *qmatmul_rows; /* task: AIE_QMM_ROWS rows of one matrix */
    aie_q8_task_fn *qadd_chunk;   /* task: AIE_QADD_CHUNK elements */
} aie_q8_kernels;

extern const aie_q8_kernels aie_q8_scalar;
#ifdef AIE_HAVE_X86
extern const aie_q8_kernels aie_q8_avx2;
#endif

#endif /* AIE_QLINEAR_U8_KERNELS_H */
