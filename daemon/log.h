/* TEMPORARY STUB (replaced by branch log) */
#ifndef MD_LOG_H
#define MD_LOG_H
#include <stdbool.h>
#include <stdint.h>
#include <time.h>
#include "config.h"
typedef struct md_access_entry {
    const char *peer;
    const char *method;
    size_t method_len;
    const char *target;
    size_t target_len;
    bool target_cut;
    uint8_t http_major, http_minor;
    uint16_t status;
    uint64_t body_bytes;
    const char *referer;
    size_t referer_len;
    const char *user_agent;
    size_t user_agent_len;
    uint64_t duration_ns;
    time_t time;
} md_access_entry;
int md_log_open(const md_config *cfg, md_error *err);
int md_log_apply(const md_config *cfg, md_error *err);
int md_log_reopen(void);
void md_log(md_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
bool md_log_enabled(md_log_level level);
bool md_log_access_on(void);
void md_log_access(const md_access_entry *e);
uint64_t md_log_access_dropped(void);
void md_log_close(void);
#endif
