/* A client's IP address as a key, for the tables and rules that look a client up on every
 * request (allow and deny, rate limits, connections per client): 16 bytes as two words in the
 * order of the address's bytes, an IPv4 address (of an IPv4 socket, or v4-mapped on an IPv6
 * one) as ::ffff:a.b.c.d, so that an IPv4 client is one key whichever socket it came on. A
 * prefix is a mask of the same shape: matching one, or masking a key to one, is two ANDs.
 */
#ifndef MD_ADDR_H
#define MD_ADDR_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

typedef struct md_addr_key {
    uint64_t w[2];
} md_addr_key;

/* The families md_addr_key_of() tells apart. */
enum { MD_ADDR_NONE = 0, MD_ADDR_V4 = 4, MD_ADDR_V6 = 6 };

/* ss's key into *k, and its family: MD_ADDR_V4 (IPv4 or v4-mapped), MD_ADDR_V6, or
 * MD_ADDR_NONE for NULL or a socket that is not IP (*k all ones then, which no address is). */
unsigned md_addr_key_of(const struct sockaddr_storage *ss, md_addr_key *k);

/* The mask that keeps the first bits of a key (0..128): an IPv4 prefix of n bits is 96 + n,
 * the ::ffff: part included. */
md_addr_key md_addr_mask(unsigned bits);

/* k with only mask's bits. */
static inline md_addr_key md_addr_masked(md_addr_key k, const md_addr_key *mask)
{
    k.w[0] &= mask->w[0];
    k.w[1] &= mask->w[1];
    return k;
}

/* k is in the block of net (already masked) under mask. */
static inline bool md_addr_in(const md_addr_key *k, const md_addr_key *net, const md_addr_key *mask)
{
    return ((k->w[0] & mask->w[0]) == net->w[0]) & ((k->w[1] & mask->w[1]) == net->w[1]);
}

/* splitmix64's finaliser: every bit of x moves about half of the result's. */
static inline uint64_t md_mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= UINT64_C(0xbf58476d1ce4e5b9);
    x ^= x >> 27;
    x *= UINT64_C(0x94d049bb133111eb);
    return x ^ (x >> 31);
}

/* k's hash under a table's random seed (so that nobody can aim addresses at one bucket). */
static inline uint64_t md_addr_hash(const md_addr_key *k, uint64_t seed)
{
    return md_mix64(md_mix64(k->w[0] ^ seed) ^ k->w[1]);
}

#endif
