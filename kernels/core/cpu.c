/*
 * CPU detection and ISA selection: one decision, made once at start-up.
 * A feature counts only when the CPU reports it (CPUID) AND the OS saves the
 * matching register state on context switches (OSXSAVE + XGETBV): AVX needs
 * XCR0 bits 1-2 (SSE, AVX), AVX-512 also bits 5-7 (opmask, ZMM_Hi256,
 * Hi16_ZMM) — Intel SDM vol. 1, 13.3.
 */
#include "aie_internal.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(AIE_HAVE_X86) && (defined(__x86_64__) || defined(__i386__))
#include <cpuid.h>

static uint64_t read_xcr0(void) {
    uint32_t eax, edx;
    __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
    return ((uint64_t)edx << 32) | eax;
}

static int os_saves(uint64_t mask) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
    if (!(c & bit_OSXSAVE)) return 0;
    return (read_xcr0() & mask) == mask;
}

int aie_cpu_has_avx2(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
    int fma = (c & bit_FMA) != 0, f16c = (c & bit_F16C) != 0, avx = (c & bit_AVX) != 0;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return 0;
    int avx2 = (b & bit_AVX2) != 0;
    return avx && avx2 && fma && f16c && os_saves(0x6);
}

int aie_cpu_has_avx512(void) {
    unsigned a, b, c, d;
    if (!aie_cpu_has_avx2()) return 0;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return 0;
    int f = (b & bit_AVX512F) != 0, dq = (b & bit_AVX512DQ) != 0;
    int bw = (b & bit_AVX512BW) != 0, vl = (b & bit_AVX512VL) != 0;
    return f && dq && bw && vl && os_saves(0xE6);
}
#else
int aie_cpu_has_avx2(void) { return 0; }
int aie_cpu_has_avx512(void) { return 0; }
#endif

static _Thread_local char g_err[256];
static aie_isa g_isa = AIE_ISA_SCALAR;
static int g_init_status = AIE_OK;
static char g_init_err[256]; /* global: init may run on another thread */
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

int aie_fail(int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_err, sizeof g_err, fmt, ap);
    va_end(ap);
    return code;
}

const char *aie_last_error(void) { return g_err; }
const char *aie_version(void) { return "0.1.0"; }

const char *aie_isa_name(aie_isa isa) {
    switch (isa) {
    case AIE_ISA_SCALAR: return "scalar";
    case AIE_ISA_AVX2: return "avx2";
    case AIE_ISA_AVX512: return "avx512";
    default: return "unknown";
    }
}

aie_isa aie_best_isa(void) {
    if (aie_cpu_has_avx512()) return AIE_ISA_AVX512;
    if (aie_cpu_has_avx2()) return AIE_ISA_AVX2;
    return AIE_ISA_SCALAR;
}

static int isa_supported(aie_isa isa) { return isa >= AIE_ISA_SCALAR && isa <= aie_best_isa(); }

static void init_once(void) {
    g_isa = aie_best_isa();
    const char *want = getenv("AIE_ISA");
    if (want && *want && strcmp(want, "auto") != 0) {
        aie_isa forced = AIE_ISA_COUNT;
        for (int i = 0; i < AIE_ISA_COUNT; i++)
            if (strcmp(want, aie_isa_name((aie_isa)i)) == 0) forced = (aie_isa)i;
        if (forced == AIE_ISA_COUNT) {
            g_init_status = aie_fail(AIE_EINVAL, "AIE_ISA=%s: unknown ISA (expected scalar, avx2, avx512 or auto)", want);
        } else if (!isa_supported(forced)) {
            g_init_status = aie_fail(AIE_EUNSUPPORTED, "AIE_ISA=%s: this CPU/OS supports at most %s", want,
                                     aie_isa_name(aie_best_isa()));
        } else {
            g_isa = forced;
        }
        if (g_init_status != AIE_OK) snprintf(g_init_err, sizeof g_init_err, "%s", g_err);
    }
}

int aie_init(void) {
    pthread_once(&g_once, init_once);
    if (g_init_status != AIE_OK) return aie_fail(g_init_status, "%s", g_init_err);
    return AIE_OK;
}

int aie_ensure_init(void) {
    pthread_once(&g_once, init_once);
    return g_init_status;
}

aie_isa aie_selected_isa(void) {
    aie_ensure_init();
    return g_isa;
}

int aie_set_isa(aie_isa isa) {
    aie_ensure_init();
    if (!isa_supported(isa))
        return aie_fail(AIE_EUNSUPPORTED, "ISA %s not supported on this CPU (best: %s)", aie_isa_name(isa),
                        aie_isa_name(aie_best_isa()));
    g_isa = isa;
    return AIE_OK;
}
