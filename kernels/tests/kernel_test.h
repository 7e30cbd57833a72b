/* Minimal C test harness shared by kernels/tests/test_*.c. */
#ifndef KERNEL_TEST_H
#define KERNEL_TEST_H
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static int kt_failures = 0, kt_checks = 0;
#define KT_CHECK(cond, ...)                                                      \
    do {                                                                         \
        kt_checks++;                                                             \
        if (!(cond)) {                                                           \
            kt_failures++;                                                       \
            fprintf(stderr, "%s:%d: FAIL: ", __FILE__, __LINE__);                \
            fprintf(stderr, __VA_ARGS__);                                        \
            fputc('\n', stderr);                                                 \
        }                                                                        \
    } while (0)

/* Deterministic xorshift random floats in [-1, 1). */
static inline uint64_t kt_next(uint64_t *s) { *s ^= *s << 13; *s ^= *s >> 7; *s ^= *s << 17; return *s; }
static inline void kt_fill(float *x, size_t n, uint64_t seed) {
    uint64_t s = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) x[i] = (float)((double)(kt_next(&s) >> 11) / 4503599627370496.0 - 1.0);
}
/* malloc that never returns NULL (a test cannot go on without its buffers). */
static inline void *kt_xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "out of memory (%zu bytes)\n", n);
        exit(2);
    }
    return p;
}
static inline int kt_report(const char *name) {
    printf("%s: %d passed, %d failed\n", name, kt_checks - kt_failures, kt_failures);
    return kt_failures ? 1 : 0;
}
#endif
