/* The tooling around the code: `make run` on a fresh machine (the install step as a make of
 * its own), the suite runner's report of a failing suite, and .ci/deps.sh. Run from the
 * repository root (make test does).
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "systemd/run_cmd.h"

/* A release build of a copy of the tree, whatever this build is: once, in the release pass. */
Test(first_run, make_run_installs_in_a_make_of_its_own_then_builds_and_serves, .timeout = 400)
{
    if (TEST_SANITIZE[0] != '\0')
        cr_skip_test("the Makefile's entry points are checked in the release pass");
    static char out[OUT_MAX];
    int rc = run("tests/systemd/first-run.sh", out);
    cr_expect_eq(rc, 0, "tests/systemd/first-run.sh:\n%s", out);
}

Test(run_suites, shows_the_failing_assertion_and_fails_on_sanitizer_reports, .timeout = 120)
{
    static char out[OUT_MAX];
    int rc = run("tests/systemd/runner.sh", out);
    cr_expect_eq(rc, 0, "tests/systemd/runner.sh:\n%s", out);
}

Test(deps, missing_lists_only_what_dpkg_lacks)
{
    char out[OUT_MAX];
    /* coreutils is Essential: installed on every Debian machine. */
    int rc = run(".ci/deps.sh --missing coreutils magpie-no-such-package", out);
    cr_assert_eq(rc, 0, "%s", out);
    cr_expect_str_eq(out, "magpie-no-such-package ");
    rc = run(".ci/deps.sh coreutils", out);
    cr_expect_eq(rc, 0, "nothing missing, nothing done: %s", out);
    cr_expect_str_empty(out);
}

/* Without root it installs nothing and prints the line to run. */
Test(deps, without_root_prints_the_apt_get_line)
{
    char out[OUT_MAX];
    const char *cmd = ".ci/deps.sh coreutils magpie-no-such-package";
    char as_nobody[512];
    if (geteuid() == 0) {
        /* nobody may not read the work tree: a copy in a fresh folder. */
        snprintf(as_nobody, sizeof as_nobody,
                 "d=$(mktemp -d) && cp .ci/deps.sh $d/ && chmod 755 $d && "
                 "setpriv --reuid=nobody --regid=nogroup --clear-groups $d/deps.sh coreutils "
                 "magpie-no-such-package; rc=$?; rm -rf $d; exit $rc");
        cmd = as_nobody;
    }
    int rc = run(cmd, out);
    cr_expect_eq(rc, 1, "%s", out);
    cr_expect(strstr(out, "missing Debian packages: magpie-no-such-package\n") != NULL, "%s", out);
    cr_expect(
        strstr(out, "  sudo apt-get install --no-install-recommends magpie-no-such-package\n") !=
            NULL,
        "%s", out);
    cr_expect(strstr(out, "coreutils") == NULL, "%s", out);
}
