/* Tests for daemon/core/cfgfile.c: only regular files open, and nothing waits (a FIFO without
 * a writer would hold open(2) for ever: the test's timeout would fire). */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/cfgfile.h"

Test(cfgfile, regular_files_only_and_no_wait, .timeout = 10)
{
    char dir[] = "/tmp/md-cfgfile-XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    char reg[64], fifo[64], missing[64];
    snprintf(reg, sizeof reg, "%s/reg", dir);
    snprintf(fifo, sizeof fifo, "%s/fifo", dir);
    snprintf(missing, sizeof missing, "%s/none", dir);
    FILE *w = fopen(reg, "w");
    cr_assert_not_null(w);
    fputs("text\n", w);
    fclose(w);
    cr_assert_eq(mkfifo(fifo, 0600), 0);

    int err = 0;
    FILE *f = md_cfgfile_open(reg, &err);
    cr_assert_not_null(f);
    char line[16];
    cr_assert_not_null(fgets(line, sizeof line, f));
    cr_assert_str_eq(line, "text\n", "read as a plain, blocking FILE");
    fclose(f);
    cr_assert_eq(md_cfgfile_check(reg), 0);

    cr_assert_null(md_cfgfile_open(fifo, &err));
    cr_assert_eq(err, EINVAL);
    cr_assert_str_eq(md_cfgfile_why(err), "not a regular file");
    cr_assert_eq(md_cfgfile_check(fifo), -EINVAL);
    cr_assert_null(md_cfgfile_open(dir, &err));
    cr_assert_eq(err, EINVAL);
    cr_assert_null(md_cfgfile_open("/dev/zero", &err));
    cr_assert_eq(err, EINVAL);
    cr_assert_null(md_cfgfile_open(missing, &err));
    cr_assert_eq(err, ENOENT);
    cr_assert_eq(md_cfgfile_check(missing), -ENOENT);
    cr_assert_str_eq(md_cfgfile_why(ENOENT), strerror(ENOENT));

    unlink(reg);
    unlink(fifo);
    rmdir(dir);
}
