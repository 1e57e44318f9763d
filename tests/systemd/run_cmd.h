/* What the packaging suites share: running a tool and keeping what it printed. Include once per
 * test binary, after criterion.h. */
#ifndef TESTS_SYSTEMD_RUN_CMD_H
#define TESTS_SYSTEMD_RUN_CMD_H

#include <stdio.h>
#include <sys/wait.h>

#ifndef TEST_SANITIZE
#define TEST_SANITIZE ""
#endif

enum { OUT_MAX = 1 << 16 };

/* Run `sh -c cmd` with stderr joined to stdout; keep the first OUT_MAX - 1 bytes of the output
 * in out (NUL-terminated). Returns the exit status, or -1 when it did not exit. */
static inline int run(const char *cmd, char *out)
{
    char full[8192];
    snprintf(full, sizeof full, "( %s ) 2>&1", cmd);
    FILE *p = popen(full, "r");
    cr_assert_not_null(p, "popen %s", cmd);
    size_t n = 0, r;
    char sink[4096];
    while ((r = fread(out + n, 1, OUT_MAX - 1 - n, p)) > 0 && (n += r) < OUT_MAX - 1)
        ;
    while (fread(sink, 1, sizeof sink, p) > 0) /* the rest: let the command finish */
        ;
    out[n] = '\0';
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

#endif
