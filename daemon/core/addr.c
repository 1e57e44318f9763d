/* addr.c: a client's address as a key (addr.h). */
#include "core/addr.h"

#include <netinet/in.h>
#include <string.h>

unsigned md_addr_key_of(const struct sockaddr_storage *ss, md_addr_key *k)
{
    static const uint8_t v4_mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    uint8_t b[16];
    unsigned family;
    if (ss != NULL && ss->ss_family == AF_INET) {
        memcpy(b, v4_mapped, 12);
        memcpy(b + 12, &((const struct sockaddr_in *)ss)->sin_addr, 4);
        family = MD_ADDR_V4;
    } else if (ss != NULL && ss->ss_family == AF_INET6) {
        memcpy(b, &((const struct sockaddr_in6 *)ss)->sin6_addr, 16);
        family = memcmp(b, v4_mapped, 12) == 0 ? MD_ADDR_V4 : MD_ADDR_V6;
    } else {
        memset(k, 0xff, sizeof *k);
        return MD_ADDR_NONE;
    }
    memcpy(k->w, b, 16);
    return family;
}

md_addr_key md_addr_mask(unsigned bits)
{
    uint8_t b[16];
    for (unsigned i = 0; i < 16; i++) {
        unsigned keep = bits >= 8 * (i + 1) ? 8 : bits > 8 * i ? bits - 8 * i : 0;
        b[i] = (uint8_t)(0xff00u >> keep);
    }
    md_addr_key m;
    memcpy(m.w, b, 16);
    return m;
}
