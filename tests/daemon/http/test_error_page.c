/* Tests for daemon/http/error_page.c: the error_page key, its files per generation, and the
 * page found for a status. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "http/error_page.h"

static int key(md_route_error_pages *e, const char *v)
{
    char msg[200];
    return md_error_page_key(e, "error_page", v, 7, msg, sizeof msg);
}

Test(error_page, keys_files_and_pages, .timeout = 10)
{
    md_route_error_pages e = {0};
    char msg[300];
    const char *bad[] = {"404", "404x/p", "299 x", "600 x", "499 x", "404 ", "40 x", "404 a\tb"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        cr_assert_eq(key(&e, bad[i]), -EINVAL, "%s", bad[i]);
    cr_assert_eq(md_error_page_key(&e, "other", "404 x", 1, msg, sizeof msg), -ENOENT);
    char path[] = "/tmp/md-page-XXXXXX.html";
    int fd = mkstemps(path, 5);
    cr_assert_geq(fd, 0);
    cr_assert_eq(write(fd, "<b>no</b>", 9), 9);
    close(fd);
    char v[200];
    snprintf(v, sizeof v, "404 %s", path);
    cr_assert_eq(key(&e, v), 0);
    cr_assert_eq(key(&e, "503   back soon"), 0);
    cr_assert_eq(key(&e, "404 again"), -EINVAL, "one page a status");
    const char *body, *ctype;
    size_t len;
    cr_assert(md_error_page_find(&e, 503, &body, &len, &ctype));
    cr_assert_eq(len, 9);
    cr_assert_arr_eq(body, "back soon", 9);
    cr_assert_str_eq(ctype, "text/plain");
    cr_assert_not(md_error_page_find(&e, 404, &body, &len, &ctype), "not opened: no file yet");
    uint32_t line = 0;
    cr_assert_eq(md_error_pages_open(&e, &line, msg, sizeof msg), 0, "%s", msg);
    cr_assert(md_error_page_find(&e, 404, &body, &len, &ctype));
    cr_assert_eq(len, 9);
    cr_assert_arr_eq(body, "<b>no</b>", 9);
    cr_assert_str_eq(ctype, "text/html");
    cr_assert_not(md_error_page_find(&e, 500, &body, &len, &ctype));
    md_error_pages_close(&e);
    unlink(path);
    cr_assert_eq(md_error_pages_open(&e, &line, msg, sizeof msg), -ENOENT);
    cr_assert_eq(line, 7);
    cr_assert(strstr(msg, "cannot read"), "%s", msg);
    md_error_pages_close(&e);
    cr_assert_eq(key(&e, "500 x"), 0);
    cr_assert_eq(key(&e, "502 x"), 0);
    cr_assert_eq(key(&e, "504 x"), -EINVAL, "more than four");
}
