/* Tests for daemon/http/sites.c: host name patterns, and the choice of a site by Host or TLS
 * server name (exact before wildcard, the longest wildcard, no port, no trailing dot, any
 * case). The [site] section's parsing and messages are in server/test_config.c.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "http/routes.h"
#include "http/sites.h"

static bool matches(const char *pattern, const char *host)
{
    return md_site_name_matches(pattern, strlen(pattern), host, strlen(host));
}

Test(sites, patterns, .timeout = 5)
{
    cr_assert(matches("example.com", "example.com"));
    cr_assert_not(matches("example.com", "www.example.com"));
    cr_assert_not(matches("example.com", "example.co"));
    cr_assert(matches("*.example.com", "www.example.com"));
    cr_assert(matches("*.example.com", "a.b.example.com"), "any depth, as nginx");
    cr_assert_not(matches("*.example.com", "example.com"), "the apex is a name of its own");
    cr_assert_not(matches("*.example.com", ".example.com"));
    cr_assert_not(matches("*.example.com", "wwwexample.com"));
}

static md_route_table *table(void)
{
    md_route_table *t = calloc(1, sizeof *t);
    cr_assert_not_null(t);
    t->nsites = 4;
    strcpy(t->sites[1].name, "apex");
    strcpy(t->sites[1].names, "example.com www.example.com");
    strcpy(t->sites[2].name, "wild");
    strcpy(t->sites[2].names, "*.example.com");
    strcpy(t->sites[3].name, "deeper");
    strcpy(t->sites[3].names, "*.api.example.com [::1]");
    return t;
}

static int pick(const md_route_table *t, const char *host)
{
    return md_sites_pick(t, host, strlen(host));
}

Test(sites, pick_by_host, .timeout = 5)
{
    md_route_table *t = table();
    cr_assert_eq(pick(t, "example.com"), 1);
    cr_assert_eq(pick(t, "WWW.Example.COM"), 1, "any ASCII case");
    cr_assert_eq(pick(t, "example.com:8080"), 1, "the port is not the name");
    cr_assert_eq(pick(t, "example.com."), 1, "nor the trailing dot");
    cr_assert_eq(pick(t, "example.com.:443"), 1);
    cr_assert_eq(pick(t, "www.example.com"), 1, "exact beats the wildcard");
    cr_assert_eq(pick(t, "shop.example.com"), 2);
    cr_assert_eq(pick(t, "v1.api.example.com"), 3, "the longest wildcard wins");
    cr_assert_eq(pick(t, "api.example.com"), 2);
    cr_assert_eq(pick(t, "[::1]:8443"), 3, "an IPv6 literal keeps its brackets");
    cr_assert_eq(pick(t, "example.org"), -1, "no site: the caller's default");
    cr_assert_eq(pick(t, ""), -1);
    cr_assert_eq(pick(t, ":80"), -1);
    char long_name[400];
    memset(long_name, 'a', sizeof long_name - 1);
    long_name[sizeof long_name - 1] = '\0';
    cr_assert_eq(pick(t, long_name), -1, "longer than a name may be: no site");
    t->nsites = 0;
    cr_assert_eq(pick(t, "example.com"), -1, "no [site] at all");
    free(t);
}

Test(sites, find_by_name, .timeout = 5)
{
    md_route_table *t = table();
    cr_assert_eq(md_site_find(t, ""), 0, "the default site");
    cr_assert_eq(md_site_find(t, "wild"), 2);
    cr_assert_eq(md_site_find(t, "nope"), -1);
    free(t);
}
