/*
 * ai-engine compute kernels — public C API (prefix aie_).
 *
 * Contract for every kernel in this library:
 *  - float32 tensors, row-major, caller-owned memory; the library never
 *    allocates on a kernel call. Scratch memory (GEMM packing buffers, im2col
 *    tiles) comes from a caller-provided workspace whose size is queried with
 *    the matching *_workspace_size() function, so kernels are re-entrant.
 *  - Functions return AIE_OK (0) or a negative aie_status; the reason is in
 *    aie_last_error() (thread-local).
 *  - The ISA path is chosen once, at aie_init() (CPUID + XGETBV), or forced
 *    by the environment variable AIE_ISA (a level, below). Results are
 *    bitwise deterministic for a given level and thread count.
 *  - nthreads <= 0 means "the pool's size"; 1 runs on the caller's thread.
 *
 * Op families have their own headers, all included from here.
 */
#ifndef AIE_KERNELS_H
#define AIE_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    AIE_OK = 0,
    AIE_EINVAL = -1,     /* bad argument: shape, stride, null pointer */
    AIE_ENOMEM = -2,     /* workspace too small */
    AIE_EUNSUPPORTED = -3, /* ISA or feature not available on this CPU */
    AIE_EINTERNAL = -4
} aie_status;

typedef enum {
    AIE_ISA_SCALAR = 0,
    AIE_ISA_AVX2 = 1,    /* AVX2 + FMA + F16C */
    AIE_ISA_AVX512 = 2,  /* AVX-512 F/BW/DQ/VL */
    AIE_ISA_COUNT
} aie_isa;

/* Levels: the instruction sets a process may use, what AIE_ISA names. The
 * fp32 kernels use the level's vector ISA (aie_level_isa); the bf16/int8
 * GEMMs (aie_gemm_lowp.h) also use its dot-product and matrix extensions.
 * The first three equal the aie_isa of the same name. Not an ordered scale:
 * a CPU may have avx_vnni without avx512 (Alder Lake) or the reverse
 * (Cascade Lake); each level needs the features listed. */
typedef enum {
    AIE_LEVEL_SCALAR = 0,
    AIE_LEVEL_AVX2 = 1,
    AIE_LEVEL_AVX512 = 2,
    AIE_LEVEL_AVX_VNNI = 3,    /* avx2 + AVX-VNNI (vpdpbusd on ymm) */
    AIE_LEVEL_AVX512_VNNI = 4, /* avx512 + AVX512_VNNI */
    AIE_LEVEL_AVX512_BF16 = 5, /* avx512_vnni + AVX512_BF16 (vdpbf16ps) */
    AIE_LEVEL_AMX = 6,         /* avx512_bf16 + AMX-TILE/BF16/INT8, XCR0 tile state, and the
                                  kernel's permission (arch_prctl ARCH_REQ_XCOMP_PERM) */
    AIE_LEVEL_COUNT
} aie_level;

/* Idempotent and thread-safe; every kernel calls it lazily, but calling it
 * once at start-up turns an unsupported AIE_ISA into an early, clear error. */
int aie_init(void);
aie_isa aie_selected_isa(void);
const char *aie_isa_name(aie_isa isa);
/* Highest ISA this CPU + OS can run (independent of AIE_ISA). */
aie_isa aie_best_isa(void);
/* Force a path (tests/benchmarks). AIE_EUNSUPPORTED if the CPU lacks it.
 * Same as aie_set_level with the level of that name (no extensions). */
int aie_set_isa(aie_isa isa);
aie_level aie_selected_level(void);
/* Best level this CPU + OS supports, preferring amx > avx512_bf16 >
 * avx512_vnni > avx512 > avx_vnni > avx2 > scalar. */
aie_level aie_best_level(void);
const char *aie_level_name(aie_level level);
aie_isa aie_level_isa(aie_level level);
/* 1 when this CPU + OS can run the level, else 0 and *why (if not NULL)
 * says what is missing (a static string). */
int aie_level_supported(aie_level level, const char **why);
int aie_set_level(aie_level level);
const char *aie_last_error(void);
const char *aie_version(void);

/* ---- thread pool (core/threadpool.c) --------------------------------- */
/* One persistent pool. Default size: CPUs in the affinity mask (or
 * AIE_NUM_THREADS). Idle workers block on a condition variable: no spinning
 * between requests. */
int aie_threads_set(int n);
int aie_threads_get(void);
/* Run fn(ctx, task, ntasks) for task in [0, ntasks) on up to nthreads
 * threads (the caller participates). Tasks are assigned statically by index
 * so a given (ntasks, nthreads) always maps work the same way: results are
 * deterministic. Safe to call from several application threads at once
 * (callers serialise on the pool); nested calls run serially. */
typedef void (*aie_task_fn)(void *ctx, int64_t task, int64_t ntasks);
void aie_parallel_for(int64_t ntasks, int nthreads, aie_task_fn fn, void *ctx);

#ifdef __cplusplus
}
#endif

#include "aie_gemm.h"
#include "aie_gemm_lowp.h"
#include "aie_conv.h"
#include "aie_conv_lowp.h"
#include "aie_conv_s8.h"
#include "aie_pool.h"
#include "aie_arena.h"
#include "aie_eltwise.h"
#include "aie_reduce.h"
#include "aie_norm.h"
#include "aie_layout.h"

#endif /* AIE_KERNELS_H */
