/* Tests for daemon/http/handlers/static/mime.c: media types by extension from /etc/mime.types. */
#include <criterion/criterion.h>
#include <ctype.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
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

/* Every extension the file lists (of under 16 bytes, without a dot) finds the first type that lists
 * it, in upper case too: the hash index against a plain reading of the file. */
Test(mime, every_listed_extension_finds_its_first_type, .timeout = 10)
{
    FILE *f = fopen(MD_MIME_TYPES_PATH, "r");
    if (f == NULL)
        return; /* no table: the first test covers it */
    static char seen[4096][16];
    size_t nseen = 0, checked = 0;
    char line[512];
    while (fgets(line, sizeof line, f) != NULL) {
        char *hash = strchr(line, '#');
        if (hash != NULL)
            *hash = '\0';
        char *save = NULL, *t = strtok_r(line, " \t\r\n", &save);
        if (t == NULL || strchr(t, '/') == NULL)
            continue;
        for (char *ext = strtok_r(NULL, " \t\r\n", &save); ext != NULL;
             ext = strtok_r(NULL, " \t\r\n", &save)) {
            if (strlen(ext) >= 16 || strchr(ext, '.') != NULL)
                continue; /* too long; "cwl.json": a name's last extension is "json" */
            bool again = false;
            for (size_t i = 0; i < nseen && !again; i++)
                again = strcasecmp(seen[i], ext) == 0;
            if (again)
                continue; /* listed before: the earlier type stays */
            cr_assert_lt(nseen, sizeof seen / sizeof seen[0]);
            snprintf(seen[nseen++], sizeof seen[0], "%s", ext);
            char name[32], upper[32];
            snprintf(name, sizeof name, "f.%s", ext);
            for (size_t i = 0; i <= strlen(name); i++)
                upper[i] = (char)toupper((unsigned char)name[i]);
            const char *got = type(name);
            cr_assert(got != NULL && strcmp(got, t) == 0, "%s: %s, not %s", name,
                      got ? got : "none", t);
            got = type(upper);
            cr_assert(got != NULL && strcmp(got, t) == 0, "%s", upper);
            checked++;
        }
    }
    fclose(f);
    cr_assert_gt(checked, 100, "the file lists %zu extensions", checked);
}
