/*
 * When Linux refuses the AMX tile state, level amx is unavailable, the
 * reason is kept, and the best level falls back. A real refusal: with an
 * alternate signal stack too small for the signal frame that tile state
 * would need, ARCH_REQ_XCOMP_PERM fails with ENOSPC
 * (Documentation/arch/x86/xstate.rst); aie_init() runs after it is set.
 */
#include <signal.h>
#include <string.h>

#include "aie_kernels.h"
#include "kernel_test.h"

int main(void) {
    static char small_stack[4096]; /* a tile frame needs > 8 KiB */
    stack_t ss = {.ss_sp = small_stack, .ss_size = sizeof small_stack, .ss_flags = 0};
    KT_CHECK(sigaltstack(&ss, NULL) == 0, "sigaltstack");
    KT_CHECK(aie_init() == AIE_OK, "aie_init: %s", aie_last_error());
    const char *why = "";
    int amx = aie_level_supported(AIE_LEVEL_AMX, &why);
    if (strstr(why, "CPUID") || strstr(why, "avx512_bf16") || strstr(why, "XCR0") || strstr(why, "x86")) {
        printf("test_amx_refused: skipped, this CPU/OS has no AMX to refuse: %s\n", why);
        return kt_report("test_amx_refused");
    }
    KT_CHECK(!amx, "AMX was granted despite a %zu-byte alternate signal stack", sizeof small_stack);
    KT_CHECK(strstr(why, "Linux refused the tile state") && strstr(why, "No space left on device"),
             "the reason names the refusal: %s", why);
    KT_CHECK(aie_best_level() != AIE_LEVEL_AMX && aie_selected_level() != AIE_LEVEL_AMX, "fell back from amx");
    KT_CHECK(aie_set_level(AIE_LEVEL_AMX) == AIE_EUNSUPPORTED, "forcing amx fails");
    KT_CHECK(strstr(aie_last_error(), "refused") != NULL, "message: %s", aie_last_error());
    printf("amx refused as expected: %s\n", why);
    return kt_report("test_amx_refused");
}
