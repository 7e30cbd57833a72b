/* Internal helpers shared by every kernel source (not installed). */
#ifndef AIE_INTERNAL_H
#define AIE_INTERNAL_H

#include "aie_kernels.h"

/* Record a formatted error for aie_last_error() and return code. */
int aie_fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Ensure aie_init() ran; returns its status. Cheap after the first call. */
int aie_ensure_init(void);

/* CPU feature probe (core/cpu.c). */
int aie_cpu_has_avx2(void);
int aie_cpu_has_avx512(void);

#define AIE_ALIGN 64
#define AIE_ROUND_UP(x, a) ((((x) + (a) - 1) / (a)) * (a))

#endif
