/* Tests for daemon/http/handlers/static/mime.c: media types by extension from /etc/mime.types. */
#include <criterion/criterion.h>
#include <string.h>
#include <unistd.h>

#include "http/handlers/static/mime.h"

static const char *type(const char *name)
{
    return md_mime_type(name, strlen(name));
}

Test(mime, extensions_any_case, .timeout = 10)
{
    if (access(MD_MIME_TYPES_PATH, R_OK) != 0) {
        cr_assert_null(type("a.html"), "no table, no type");
        return;
    }
    cr_assert_str_eq(type("index.html"), "text/html");
    cr_assert_str_eq(type("sub/A.CSS"), "text/css");
    cr_assert_str_eq(type("x.tar.gz"), "application/gzip");
    cr_assert_str_eq(type("logo.png"), "image/png");
}

Test(mime, names_without_a_known_extension, .timeout = 10)
{
    const char *none[] = {"README", "dir.d/file", "a.", "a.no-such-extension-here",
                          "a.averyveryverylongextension"};
    for (size_t i = 0; i < sizeof none / sizeof none[0]; i++)
        cr_assert_null(type(none[i]), "%s", none[i]);
}
