/*
 * CPU detection and ISA selection: one decision, made once at start-up.
 * A feature counts only when the CPU reports it (CPUID) AND the OS saves the
 * matching register state on context switches (OSXSAVE + XGETBV): AVX needs
 * XCR0 bits 1-2 (SSE, AVX), AVX-512 also bits 5-7 (opmask, ZMM_Hi256,
 * Hi16_ZMM), AMX bits 17-18 (XTILECFG, XTILEDATA) — Intel SDM vol. 1, 13.3.
 * AMX also needs the process to ask Linux for the tile data state once
 * (arch_prctl ARCH_REQ_XCOMP_PERM, Documentation/arch/x86/xstate.rst); when
 * that is refused, level amx is unavailable and the reason is kept for
 * `ai-engine isa`.
 */
#include "aie_internal.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int avx2, avx512, avx_vnni, avx512_vnni, avx512_bf16, amx;
    const char *amx_why;   /* why amx is 0 */
    char amx_refused[160]; /* the kernel's answer, when it refused */
} cpu_features;

#if defined(AIE_HAVE_X86) && (defined(__x86_64__) || defined(__i386__))
#include <cpuid.h>
#include <errno.h>
#include <sys/syscall.h>
#include <unistd.h>

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

/* CPUID leaf 7 bits (Intel SDM vol. 2A, CPUID, table 3-8). */
#define CPUID7_ECX_AVX512_VNNI (1u << 11)
#define CPUID7_EDX_AMX_BF16 (1u << 22)
#define CPUID7_EDX_AMX_TILE (1u << 24)
#define CPUID7_EDX_AMX_INT8 (1u << 25)
#define CPUID7_1_EAX_AVX_VNNI (1u << 4)
#define CPUID7_1_EAX_AVX512_BF16 (1u << 5)
#define XCR0_AMX ((1u << 17) | (1u << 18))
/* arch/x86/include/uapi/asm/prctl.h: not in every libc's headers. */
#define AIE_ARCH_REQ_XCOMP_PERM 0x1023
#define AIE_XFEATURE_XTILEDATA 18

static unsigned cpuid7(int sub, int reg) {
    unsigned r[4] = {0, 0, 0, 0};
    if (!__get_cpuid_count(7, (unsigned)sub, &r[0], &r[1], &r[2], &r[3])) return 0;
    return r[reg];
}

static void probe_extensions(cpu_features *f) {
    f->avx512_vnni = f->avx512 && (cpuid7(0, 2) & CPUID7_ECX_AVX512_VNNI);
    f->avx_vnni = f->avx2 && (cpuid7(1, 0) & CPUID7_1_EAX_AVX_VNNI);
    f->avx512_bf16 = f->avx512_vnni && (cpuid7(1, 0) & CPUID7_1_EAX_AVX512_BF16);
    unsigned edx = cpuid7(0, 3);
    if (!f->avx512_bf16) {
        f->amx_why = "needs avx512_bf16 first";
    } else if ((edx & (CPUID7_EDX_AMX_TILE | CPUID7_EDX_AMX_BF16 | CPUID7_EDX_AMX_INT8)) !=
               (CPUID7_EDX_AMX_TILE | CPUID7_EDX_AMX_BF16 | CPUID7_EDX_AMX_INT8)) {
        f->amx_why = "CPUID lacks amx_tile/amx_bf16/amx_int8";
    } else if (!os_saves(XCR0_AMX)) {
        f->amx_why = "the OS does not enable tile state (XCR0 bits 17-18)";
    } else {
#if defined(__linux__) && defined(SYS_arch_prctl)
        if (syscall(SYS_arch_prctl, AIE_ARCH_REQ_XCOMP_PERM, AIE_XFEATURE_XTILEDATA) != 0) {
            snprintf(f->amx_refused, sizeof f->amx_refused, "Linux refused the tile state: arch_prctl("
                     "ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) failed: %s", strerror(errno));
            f->amx_why = f->amx_refused;
        } else {
            f->amx = 1;
        }
#else
        f->amx_why = "tile state permission is only requested on Linux";
#endif
    }
}
#else
int aie_cpu_has_avx2(void) { return 0; }
int aie_cpu_has_avx512(void) { return 0; }
static void probe_extensions(cpu_features *f) { f->amx_why = "not an x86-64 CPU"; }
#endif

_Static_assert((int)AIE_LEVEL_SCALAR == (int)AIE_ISA_SCALAR && (int)AIE_LEVEL_AVX2 == (int)AIE_ISA_AVX2 &&
                   (int)AIE_LEVEL_AVX512 == (int)AIE_ISA_AVX512,
               "aie_set_isa maps an aie_isa onto the level of the same value");

static _Thread_local char g_err[256];
static aie_level g_level = AIE_LEVEL_SCALAR;
static cpu_features g_cpu;
static int g_init_status = AIE_OK;
static char g_init_err[320]; /* global: init may run on another thread */
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

const char *aie_level_name(aie_level level) {
    switch (level) {
    case AIE_LEVEL_SCALAR: return "scalar";
    case AIE_LEVEL_AVX2: return "avx2";
    case AIE_LEVEL_AVX512: return "avx512";
    case AIE_LEVEL_AVX_VNNI: return "avx_vnni";
    case AIE_LEVEL_AVX512_VNNI: return "avx512_vnni";
    case AIE_LEVEL_AVX512_BF16: return "avx512_bf16";
    case AIE_LEVEL_AMX: return "amx";
    default: return "unknown";
    }
}

aie_isa aie_level_isa(aie_level level) {
    switch (level) {
    case AIE_LEVEL_AVX2:
    case AIE_LEVEL_AVX_VNNI: return AIE_ISA_AVX2;
    case AIE_LEVEL_AVX512:
    case AIE_LEVEL_AVX512_VNNI:
    case AIE_LEVEL_AVX512_BF16:
    case AIE_LEVEL_AMX: return AIE_ISA_AVX512;
    default: return AIE_ISA_SCALAR;
    }
}

/* Probed once (the AMX permission request must not repeat per query). */
static void probe_once(void) {
    g_cpu.avx2 = aie_cpu_has_avx2();
    g_cpu.avx512 = aie_cpu_has_avx512();
    probe_extensions(&g_cpu);
}
static pthread_once_t g_probe_once = PTHREAD_ONCE_INIT;

static const cpu_features *cpu(void) {
    pthread_once(&g_probe_once, probe_once);
    return &g_cpu;
}

int aie_level_supported(aie_level level, const char **why) {
    const cpu_features *f = cpu();
    const char *missing = NULL;
    switch (level) {
    case AIE_LEVEL_SCALAR: break;
    case AIE_LEVEL_AVX2: if (!f->avx2) missing = "no AVX2+FMA+F16C (or the OS does not save ymm state)"; break;
    case AIE_LEVEL_AVX512:
        if (!f->avx512) missing = "no AVX-512 F/BW/DQ/VL (or the OS does not save zmm state)";
        break;
    case AIE_LEVEL_AVX_VNNI: if (!f->avx_vnni) missing = "no AVX-VNNI (CPUID.7.1:EAX[4]) with AVX2"; break;
    case AIE_LEVEL_AVX512_VNNI: if (!f->avx512_vnni) missing = "no AVX512_VNNI (CPUID.7:ECX[11]) with AVX-512"; break;
    case AIE_LEVEL_AVX512_BF16:
        if (!f->avx512_bf16) missing = "no AVX512_BF16 (CPUID.7.1:EAX[5]) with AVX512_VNNI";
        break;
    case AIE_LEVEL_AMX: if (!f->amx) missing = f->amx_why; break;
    default: missing = "not a level";
    }
    if (why) *why = missing ? missing : "";
    return missing == NULL;
}

aie_level aie_best_level(void) {
    static const aie_level pref[] = {AIE_LEVEL_AMX,    AIE_LEVEL_AVX512_BF16, AIE_LEVEL_AVX512_VNNI,
                                     AIE_LEVEL_AVX512, AIE_LEVEL_AVX_VNNI,    AIE_LEVEL_AVX2};
    for (size_t i = 0; i < sizeof pref / sizeof pref[0]; i++)
        if (aie_level_supported(pref[i], NULL)) return pref[i];
    return AIE_LEVEL_SCALAR;
}

aie_isa aie_best_isa(void) {
    if (aie_cpu_has_avx512()) return AIE_ISA_AVX512;
    if (aie_cpu_has_avx2()) return AIE_ISA_AVX2;
    return AIE_ISA_SCALAR;
}

static void supported_list(char *buf, size_t n) {
    buf[0] = 0;
    for (int l = 0; l < AIE_LEVEL_COUNT; l++)
        if (aie_level_supported((aie_level)l, NULL))
            snprintf(buf + strlen(buf), n - strlen(buf), "%s%s", buf[0] ? ", " : "", aie_level_name((aie_level)l));
}

static void init_once(void) {
    g_level = aie_best_level();
    const char *want = getenv("AIE_ISA");
    if (want && *want && strcmp(want, "auto") != 0) {
        aie_level forced = AIE_LEVEL_COUNT;
        for (int i = 0; i < AIE_LEVEL_COUNT; i++)
            if (strcmp(want, aie_level_name((aie_level)i)) == 0) forced = (aie_level)i;
        const char *why = "";
        if (forced == AIE_LEVEL_COUNT) {
            g_init_status = aie_fail(AIE_EINVAL, "AIE_ISA=%s: unknown ISA (expected scalar, avx2, avx_vnni, avx512, "
                                     "avx512_vnni, avx512_bf16, amx or auto)", want);
        } else if (!aie_level_supported(forced, &why)) {
            char list[128];
            supported_list(list, sizeof list);
            g_init_status = aie_fail(AIE_EUNSUPPORTED, "AIE_ISA=%s: not supported by this CPU/OS (%s); supported: %s",
                                     want, why, list);
        } else {
            g_level = forced;
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

aie_level aie_selected_level(void) {
    aie_ensure_init();
    return g_level;
}

aie_isa aie_selected_isa(void) { return aie_level_isa(aie_selected_level()); }

int aie_set_level(aie_level level) {
    aie_ensure_init();
    const char *why = "";
    if (level < 0 || level >= AIE_LEVEL_COUNT) return aie_fail(AIE_EINVAL, "level %d is not an aie_level", (int)level);
    if (!aie_level_supported(level, &why))
        return aie_fail(AIE_EUNSUPPORTED, "ISA %s not supported on this CPU/OS: %s", aie_level_name(level), why);
    g_level = level;
    return AIE_OK;
}

int aie_set_isa(aie_isa isa) {
    aie_ensure_init();
    if (isa < AIE_ISA_SCALAR || isa >= AIE_ISA_COUNT) return aie_fail(AIE_EINVAL, "ISA %d is not an aie_isa", (int)isa);
    if (!aie_level_supported((aie_level)isa, NULL))
        return aie_fail(AIE_EUNSUPPORTED, "ISA %s not supported on this CPU (best: %s)", aie_isa_name(isa),
                        aie_isa_name(aie_best_isa()));
    g_level = (aie_level)isa; /* the first levels are the aie_isa of the same name */
    return AIE_OK;
}
