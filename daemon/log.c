/* TEMPORARY STUB (replaced by branch log) */
#include "log.h"
#include <stdarg.h>
#include <stdio.h>
static int level = MD_LOG_INFO;
static bool acc;
int md_log_open(const md_config *cfg, md_error *err)
{
    level = cfg->log_level;
    acc = cfg->access_log != MD_ACCESS_LOG_OFF;
    return 0;
}
int md_log_apply(const md_config *cfg, md_error *err)
{
    return md_log_open(cfg, err);
}
int md_log_reopen(void)
{
    return 0;
}
void md_log(md_log_level l, const char *fmt, ...)
{
    if ((int)l > level)
        return;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "<%d>",
            l == MD_LOG_ERROR  ? 3
            : l == MD_LOG_WARN ? 4
            : l == MD_LOG_INFO ? 6
                               : 7);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}
bool md_log_enabled(md_log_level l)
{
    return (int)l <= level;
}
bool md_log_access_on(void)
{
    return acc;
}
void md_log_access(const md_access_entry *e)
{
    fprintf(stderr, "<6>%s - - \"%.*s %.*s\" %u %llu\n", e->peer, (int)e->method_len,
            e->method ? e->method : "-", (int)e->target_len, e->target, e->status,
            (unsigned long long)e->body_bytes);
}
uint64_t md_log_access_dropped(void)
{
    return 0;
}
void md_log_close(void) {}
