/* Packaging checks: the systemd units (systemd/), the man pages, `make install`, and the HAProxy
 * example. They run the tools a packager and an administrator would (systemd-analyze, groff,
 * man, haproxy, strace, readelf, pkg-config) and assert on what those print.
 *
 * The units name /usr/sbin/magpied, which need not exist here: each test renders them into a
 * scratch directory naming this build's magpied instead, the same substitution `make install`
 * makes with $(SBINDIR). Run from the repository root (make test does); TEST_BUILD_DIR and
 * TEST_SANITIZE say which build this is.
 */
#include <criterion/criterion.h>
#include <limits.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "systemd/run_cmd.h"

#ifndef TEST_BUILD_DIR
#define TEST_BUILD_DIR "build/release"
#endif

static const char *const units[] = {"magpied.service", "magpied@.service", "magpied.socket",
                                    "magpied-echo.socket"};

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "cannot open %s", path);
    static char buf[1 << 17];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    cr_assert(n < sizeof buf - 1, "%s is too long for this test", path);
    buf[n] = '\0';
    fclose(f);
    return strdup(buf);
}

/* A scratch directory with the units rendered for this build's magpied and the man pages in
 * man/man8 and man/man5, for Documentation=man:... (systemd-analyze verify runs man). */
static char scratch[64];

static void render_units(void)
{
    char magpied[PATH_MAX], cmd[8192], out[OUT_MAX];
    cr_assert_not_null(realpath(TEST_BUILD_DIR "/magpied", magpied),
                       "no " TEST_BUILD_DIR "/magpied: build it first");
    strcpy(scratch, "/tmp/magpie-units.XXXXXX");
    cr_assert_not_null(mkdtemp(scratch));
    snprintf(cmd, sizeof cmd,
             "set -e; mkdir -p %1$s/man/man8 %1$s/man/man5;"
             " cp daemon/magpied.8 %1$s/man/man8/; cp config/magpied.conf.5 %1$s/man/man5/;"
             " for u in magpied.service magpied@.service magpied.socket magpied-echo.socket; do"
             "   sed 's|/usr/sbin/magpied|%2$s|g' systemd/$u > %1$s/$u; done",
             scratch, magpied);
    cr_assert_eq(run(cmd, out), 0, "rendering the units: %s", out);
}

static void remove_scratch(void)
{
    char cmd[128], out[OUT_MAX];
    if (scratch[0])
        snprintf(cmd, sizeof cmd, "rm -rf %s", scratch), run(cmd, out);
}

TestSuite(units, .init = render_units, .fini = remove_scratch);

Test(units, verify_prints_nothing, .timeout = 60)
{
    char cmd[1024], out[OUT_MAX];
    /* magpied@1.service: the template as an instance, with %i filled in. */
    snprintf(cmd, sizeof cmd,
             "cd %1$s && MANPATH=%1$s/man systemd-analyze verify magpied.service "
             "magpied@.service magpied@1.service magpied.socket magpied-echo.socket",
             scratch);
    int rc = run(cmd, out);
    cr_expect_eq(rc, 0, "systemd-analyze verify exited %d:\n%s", rc, out);
    cr_expect_str_empty(out, "systemd-analyze verify printed:\n%s", out);
}

/* The overall exposure systemd-analyze security gives a unit; Debian's nginx.service gets 9.6. */
static double exposure(const char *unit)
{
    char cmd[1024], out[OUT_MAX];
    snprintf(cmd, sizeof cmd, "cd %s && systemd-analyze security --offline=yes %s", scratch, unit);
    int rc = run(cmd, out);
    cr_assert_eq(rc, 0, "systemd-analyze security %s exited %d:\n%s", unit, rc, out);
    const char *line = strstr(out, "Overall exposure level for ");
    cr_assert_not_null(line, "no overall exposure level in:\n%s", out);
    const char *colon = strstr(line, ": ");
    cr_assert_not_null(colon, "cannot parse: %.120s", line);
    char *end;
    double e = strtod(colon + 2, &end);
    cr_assert(end != colon + 2, "cannot parse: %.120s", line);
    return e;
}

Test(units, service_exposure_at_most_2, .timeout = 60)
{
    double e = exposure("magpied.service");
    cr_expect(e <= 2.0, "magpied.service: exposure %.1f > 2.0", e);
}

Test(units, template_exposure_at_most_2, .timeout = 60)
{
    double e = exposure("magpied@1.service");
    cr_expect(e <= 2.0, "magpied@1.service: exposure %.1f > 2.0", e);
}

/* magpied's calls under strace, against each unit's SystemCallFilter= and
 * RestrictAddressFamilies= (see the script). */
static void check_syscalls(const char *unit)
{
    char magpied[PATH_MAX], cmd[PATH_MAX + 256], out[OUT_MAX];
    cr_assert_not_null(realpath(TEST_BUILD_DIR "/magpied", magpied));
    snprintf(cmd, sizeof cmd, "tests/systemd/syscalls.sh %s systemd/%s", magpied, unit);
    int rc = run(cmd, out);
    cr_expect_eq(rc, 0, "%s would stop magpied:\n%s", unit, out);
}

Test(units, service_filter_allows_magpied, .timeout = 60)
{
    check_syscalls("magpied.service");
}

Test(units, template_filter_allows_magpied, .timeout = 60)
{
    check_syscalls("magpied@.service");
}

/* What the daemon looks for in LISTEN_FDNAMES, and where each socket's fds go. */
Test(units, sockets_pass_named_fds_to_magpied, .timeout = 60)
{
    char *http = slurp("systemd/magpied.socket"), *echo = slurp("systemd/magpied-echo.socket");
    cr_expect_not_null(strstr(http, "\nFileDescriptorName=http\n"));
    cr_expect_not_null(strstr(echo, "\nFileDescriptorName=echo\n"));
    cr_expect_not_null(strstr(http, "\nService=magpied.service\n"));
    cr_expect_not_null(strstr(echo, "\nService=magpied.service\n"));
    cr_expect_not_null(strstr(http, "\nListenStream=127.0.0.1:8080\n"), "[http] listen's default");
    cr_expect_not_null(strstr(echo, "\nListenStream=127.0.0.1:8007\n"), "[echo] listen's default");
    free(http);
    free(echo);
}

/* Every service checks its configuration before starting and before a reload. */
Test(units, services_check_config_first, .timeout = 60)
{
    for (size_t i = 0; i < 2; i++) {
        char path[64];
        snprintf(path, sizeof path, "systemd/%s", units[i]);
        char *u = slurp(path);
        cr_expect_not_null(strstr(u, "\nType=notify\n"), "%s", path);
        cr_expect_not_null(strstr(u, "\nExecStartPre=/usr/sbin/magpied -t -c "), "%s", path);
        const char *reload = strstr(u, "\nExecReload=/usr/sbin/magpied -t -c ");
        const char *hup = strstr(u, "\nExecReload=/bin/kill -HUP $MAINPID\n");
        cr_expect(reload && hup && reload < hup, "%s: ExecReload= must check, then SIGHUP", path);
        free(u);
    }
}

/* ------------------------------------------------------------------------------------------ */

static void lint(const char *page)
{
    char cmd[512], out[OUT_MAX];
    snprintf(cmd, sizeof cmd, "groff -man -Tutf8 -ww -z %s", page);
    int rc = run(cmd, out);
    cr_expect_eq(rc, 0, "%s exited %d:\n%s", cmd, rc, out);
    cr_expect_str_empty(out, "%s:\n%s", cmd, out);
    /* man itself (through its preprocessors), at a narrow width where long lines would warn. */
    snprintf(cmd, sizeof cmd, "LC_ALL=C.UTF-8 MANWIDTH=80 man --warnings -E UTF-8 -l %s >/dev/null",
             page);
    rc = run(cmd, out);
    cr_expect_eq(rc, 0, "%s exited %d:\n%s", cmd, rc, out);
    cr_expect_str_empty(out, "%s:\n%s", cmd, out);
}

Test(man, magpied_8_renders_cleanly, .timeout = 60)
{
    lint("daemon/magpied.8");
}

Test(man, magpied_conf_5_renders_cleanly, .timeout = 60)
{
    lint("config/magpied.conf.5");
}

/* libmagpie's reference (make docs: runtime/doc/gen-man.sh): every group's page renders
 * cleanly, and each function's page opens its group's. */
Test(man, reference_pages_render_cleanly, .timeout = 120)
{
    static const char *const pages[] = {"magpie",      "mp_task",    "mp_runtime", "mp_sync",
                                        "mp_blocking", "mp_pool",    "mp_loop",    "mp_tcp",
                                        "mp_udp",      "mp_resolve", "mp_file"};
    for (size_t i = 0; i < sizeof pages / sizeof pages[0]; i++) {
        char path[256];
        snprintf(path, sizeof path, TEST_BUILD_DIR "/docs/man3/%s.3", pages[i]);
        cr_assert_eq(access(path, R_OK), 0, "%s: run make docs", path);
        lint(path);
    }
    static char out[OUT_MAX];
    int rc = run("cd " TEST_BUILD_DIR "/docs && man -l man3/mp_tcp_read_poll.3 2>&1 | "
                 "grep -c 'mp_tcp_read_poll\\|MP_TCP(3)'",
                 out);
    cr_expect_eq(rc, 0, "mp_tcp_read_poll.3 does not open mp_tcp.3: %s", out);
}

/* magpied.conf(5) documents every key of config/magpied.conf, under its section, with the
 * same default and the same range as the file's comment. */
Test(man, conf_5_matches_the_shipped_config, .timeout = 60)
{
    char *conf = slurp("config/magpied.conf"), *man = slurp("config/magpied.conf.5");
    regex_t range;
    cr_assert_eq(regcomp(&range, "[0-9]+\\.\\.[0-9]+", REG_EXTENDED), 0);
    char section[64] = "", comment[4096] = "";
    int keys = 0;
    for (char *save, *line = strtok_r(conf, "\n", &save); line;
         line = strtok_r(NULL, "\n", &save)) {
        if (line[0] == ';' || line[0] == '#') {
            if (strlen(comment) + strlen(line) + 2 < sizeof comment)
                strcat(strcat(comment, line), "\n");
            continue;
        }
        if (sscanf(line, "[%63[^]]]", section) == 1) {
            comment[0] = '\0';
            continue;
        }
        char key[64], value[256] = "";
        if (sscanf(line, "%63s = %255s", key, value) < 1 || !strchr(line, '='))
            continue;
        keys++;
        /* Route sections repeat: their keys are the handlers' options, documented once
         * under ".SH [route PATH]" without a default of the file's. */
        if (strncmp(section, "route", 5) == 0) {
            char entry[96];
            const char *from = strstr(man, "\n.SH [route PATH]\n");
            snprintf(entry, sizeof entry, "\n.BR %s \" (", key);
            cr_expect(from && strstr(from, entry), "magpied.conf.5: no route option \"%s\"", key);
            comment[0] = '\0';
            continue;
        }
        /* The key's entry: after ".SH [section]", before the next .SH. */
        char sh[96], entry[512];
        snprintf(sh, sizeof sh, "\n.SH [%s]\n", section);
        const char *from = strstr(man, sh);
        cr_expect_not_null(from, "magpied.conf.5 has no section [%s]", section);
        if (!from)
            continue;
        const char *to = strstr(from + 1, "\n.SH ");
        snprintf(entry, sizeof entry, "\n.BR %s \" (default \" %s", key, value);
        const char *at = strstr(from, entry);
        cr_expect(at && (!to || at < to), "magpied.conf.5: no \"%s\" under [%s] with default %s",
                  key, section, value);
        regmatch_t m;
        if (at && regexec(&range, comment, 1, &m, 0) == 0) {
            char want[80];
            snprintf(want, sizeof want, "range %.*s)", (int)(m.rm_eo - m.rm_so), comment + m.rm_so);
            const char *eol = strchr(at + 1, '\n');
            cr_expect(eol && memmem(at, (size_t)(eol - at), want, strlen(want)),
                      "magpied.conf.5: [%s] %s should say \"%s\"", section, key, want);
        }
        comment[0] = '\0';
    }
    cr_expect(keys >= 19, "found only %d keys in config/magpied.conf", keys);
    regfree(&range);
    free(conf);
    free(man);
}

/* ------------------------------------------------------------------------------------------ */

/* A user installs the release build; the sanitizer passes skip it as first_run does (each cost
 * CI a minute and checked nothing the release pass does not). */
Test(install, stays_in_its_prefix_and_the_pc_files_suffice, .timeout = 300)
{
    if (TEST_SANITIZE[0] != '\0')
        cr_skip_test("make install is checked in the release pass");
    static char out[OUT_MAX];
    int rc = run("tests/systemd/install.sh " TEST_SANITIZE, out);
    cr_expect_eq(rc, 0, "tests/systemd/install.sh:\n%s", out);
}

Test(haproxy, example_is_valid, .timeout = 60)
{
    char out[OUT_MAX];
    int rc = run("haproxy -c -f config/haproxy.cfg.example", out);
    cr_expect_eq(rc, 0, "haproxy -c exited %d:\n%s", rc, out);
    cr_expect_null(strstr(out, "WARNING"), "haproxy -c warns:\n%s", out);
    cr_expect_null(strstr(out, "ALERT"), "haproxy -c alerts:\n%s", out);
}
