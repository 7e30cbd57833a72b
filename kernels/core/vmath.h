/*
 * Per-ISA inner loops of the elementwise, reduction and normalisation
 * kernels (internal). Every op family is a driver in core/ (shape handling,
 * broadcasting, threading) that calls these contiguous-array primitives
 * through one table per ISA:
 *   scalar/vmath_scalar.c  plain C, one element at a time
 *   avx2/vmath_avx2.c      core/vmath_simd.h instantiated for 8 lanes
 *   avx512/vmath_avx512.c  core/vmath_simd.h instantiated for 16 lanes
 * The unary ops of all three are core/vmath_unary_body.h over core/vmath_fn.h
 * (one math, the same bits on every ISA).
 * aie_vm() returns the table of the ISA selected now (aie_selected_isa()).
 */
#ifndef AIE_VMATH_H
#define AIE_VMATH_H

#include <stdint.h>

#include "aie_internal.h"

/* Row reductions (row_reduce) and column accumulations (col_accumulate). */
typedef enum {
    AIE_VR_SUM = 0,    /* sum x */
    AIE_VR_SUMSQ,      /* sum (x - c)^2 */
    AIE_VR_ABSSUM,     /* sum |x| */
    AIE_VR_MAX,        /* NaN-propagating */
    AIE_VR_MIN,
    AIE_VR_COUNT
} aie_vr_op;

typedef struct {
    /* y[i] = op(x[i]), i < n; AIE_U_* codes with AIE_UF_VEC; x == y allowed. */
    void (*unary)(int op, const float *x, float *y, int64_t n, float p0, float p1);
    /* y[i] = a[i * sa] op b[i * sb] with sa, sb in {0, 1}; aie_binary_op codes
     * ADD..MIN (POW only for scalar b in {0, 0.5, 1, 2, 3, -1}: the driver
     * routes the rest to libm). */
    void (*binary)(int op, const float *a, int64_t sa, const float *b, int64_t sb, float *y, int64_t n);
    /* y[i] = a[i * sa] cmp b[i * sb] as 0/1 bytes; aie_compare_op codes. */
    void (*compare)(int op, const float *a, int64_t sa, const float *b, int64_t sb, uint8_t *y, int64_t n);
    /* Reduce x[0..n) (c: the SUMSQ centre). Fixed order for a given ISA. */
    float (*row_reduce)(int op, const float *x, int64_t n, float c);
    /* acc[j] = acc[j] op x[j] for j < n (SUM, SUMSQ with c = 0, ABSSUM, MAX, MIN). */
    void (*col_accumulate)(int op, float *acc, const float *x, int64_t n);
    /* y[i] = exp(x[i] - m[i * sm]), sm in {0, 1}. */
    void (*exp_shift)(const float *x, const float *m, int64_t sm, float *y, int64_t n);
    /* y[i] = (x[i] - mean) * invstd * scale[i] + (bias ? bias[i] : 0). */
    void (*norm_apply)(const float *x, float *y, int64_t n, float mean, float invstd,
                       const float *scale, const float *bias);
    /* In place over s[0..n): s = softmax(scale * s + (mask ? mask : 0)), mask
     * contiguous: three passes where scale/mask, max, exp, sum and divide took
     * five, the sum's reciprocal multiplied in (the bf16 attention, whose P is
     * rounded to bf16 next; the Softmax op keeps exp_shift and a division). */
    void (*softmax_scaled)(float *s, int64_t n, float scale, const float *mask);
} aie_vm_table;

/* Every ISA's table, from the vm_* functions of the file that expands it
 * (core/vmath_simd.h, scalar/vmath_scalar.c): the members listed once. */
#define AIE_VM_TABLE_OF_VM_FUNCTIONS                                                              \
    {.unary = vm_unary, .binary = vm_binary, .compare = vm_compare, .row_reduce = vm_row_reduce, \
     .col_accumulate = vm_col_accumulate, .exp_shift = vm_exp_shift, .norm_apply = vm_norm_apply,     \
     .softmax_scaled = vm_softmax_scaled}

extern const aie_vm_table aie_vm_scalar;
#if defined(AIE_HAVE_X86)
extern const aie_vm_table aie_vm_avx2;
extern const aie_vm_table aie_vm_avx512;
#endif

/* The table of the ISA selected now. */
const aie_vm_table *aie_vm(void);

/* Shared by every driver: resolve nthreads <= 0 to the pool size, and cap
 * the number of tasks so each gets at least min_per_task units of work. */
int aie_ops_threads(int nthreads);
int64_t aie_ops_tasks(int64_t units, int64_t work_per_unit, int nthreads);
/* [lo, hi) of task t out of ntasks over `units` units. */
void aie_ops_chunk(int64_t units, int64_t t, int64_t ntasks, int64_t *lo, int64_t *hi);

#endif /* AIE_VMATH_H */
