/* aie_exec_runner: the thread's life cycle, the eventfd signal, collect's
 * states and a failing run's message, under the plain and ASan/UBSan
 * builds (the Python tests run real models through it). */
#include <poll.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "aie_kernels.h"
#include "aie_exec.h"
#include "kernel_test.h"

/* Wait (bounded) for the runner's signal; returns the eventfd's count. */
static uint64_t wait_signal(int fd) {
    struct pollfd p = {fd, POLLIN, 0};
    if (poll(&p, 1, 5000) != 1) return 0;
    uint64_t v = 0;
    if (read(fd, &v, sizeof v) != (ssize_t)sizeof v) return 0;
    return v;
}

int main(void) {
    if (aie_init() != AIE_OK) {
        fprintf(stderr, "aie_init: %s\n", aie_last_error());
        return 1;
    }
    KT_CHECK(aie_exec_runner_new(-1) == NULL && strstr(aie_last_error(), "notify_fd"), "bad fd accepted");

    int fd = eventfd(0, EFD_CLOEXEC);
    KT_CHECK(fd >= 0, "eventfd");
    aie_exec_runner *r = aie_exec_runner_new(fd);
    KT_CHECK(r != NULL, "runner_new: %s", aie_last_error());
    char msg[256];

    /* nothing finished yet */
    KT_CHECK(aie_exec_runner_collect(r, msg, sizeof msg) == AIE_EINVAL, "collect before any run");

    /* an empty plan runs and succeeds, many times over */
    const aie_exec_plan empty = {0, NULL, 0, NULL, NULL, NULL, NULL};
    for (int i = 0; i < 200; i++) {
        KT_CHECK(aie_exec_runner_submit(r, &empty, NULL, NULL, NULL, NULL, 1) == AIE_OK, "submit %d: %s", i,
                 aie_last_error());
        KT_CHECK(wait_signal(fd) == 1, "run %d: no signal", i);
        KT_CHECK(aie_exec_runner_collect(r, msg, sizeof msg) == AIE_OK && msg[0] == '\0', "run %d: %s", i, msg);
    }

    /* a second submit before collect is refused, and the first run is kept */
    KT_CHECK(aie_exec_runner_submit(r, &empty, NULL, NULL, NULL, NULL, 1) == AIE_OK, "submit");
    KT_CHECK(aie_exec_runner_submit(r, &empty, NULL, NULL, NULL, NULL, 1) == AIE_EINVAL &&
                 strstr(aie_last_error(), "not been collected"),
             "double submit accepted");
    KT_CHECK(wait_signal(fd) == 1, "no signal");
    KT_CHECK(aie_exec_runner_collect(r, msg, sizeof msg) == AIE_OK, "collect: %s", msg);

    /* a failing run: its status and message come back through collect */
    const aie_step_record bad_step = {.op = 987654};
    const aie_exec_plan bad = {1, &bad_step.op, 0, NULL, NULL, NULL, NULL};
    KT_CHECK(aie_exec_runner_submit(r, &bad, NULL, NULL, NULL, NULL, 1) == AIE_OK, "submit bad");
    KT_CHECK(wait_signal(fd) == 1, "no signal for the failing run");
    int rc = aie_exec_runner_collect(r, msg, sizeof msg);
    KT_CHECK(rc != AIE_OK && msg[0] != '\0', "failing run: rc %d, message '%s'", rc, msg);

    /* free with a finished but uncollected run, then a fresh runner freed idle */
    KT_CHECK(aie_exec_runner_submit(r, &empty, NULL, NULL, NULL, NULL, 1) == AIE_OK, "submit");
    KT_CHECK(wait_signal(fd) == 1, "no signal");
    aie_exec_runner_free(r);
    aie_exec_runner *idle = aie_exec_runner_new(fd);
    KT_CHECK(idle != NULL, "runner_new again");
    aie_exec_runner_free(idle);
    aie_exec_runner_free(NULL);
    close(fd);
    return kt_report("test_exec_runner");
}
