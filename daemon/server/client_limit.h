/* Open connections per client address on one listener ([limits], [echo], [https] and
 * [listener NAME] max_connections_per_client), as nginx's limit_conn and HAProxy's
 * `tcp-request connection reject if { src_conn_cur gt N }`: a client (an IPv4 address, or an
 * IPv6 address's first 64 bits) past the limit has its new connection closed at accept, before
 * a byte is read, so that one client cannot take a listener's whole max_connections.
 *
 * Loop side only: accepts and closes are counted on the loop's thread (listener.c), so the
 * table takes no lock. A connection remembers its client's key (md_conn.client_key), and its
 * close gives the count back whatever a reload did to the limit meanwhile. The table holds one
 * entry per client with a connection open: at most the listener's open connections, grown as
 * needed (load at most one half), never more.
 */
#ifndef MD_CLIENT_LIMIT_H
#define MD_CLIENT_LIMIT_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

typedef struct md_client_counts md_client_counts;

/* An empty table: NULL when memory runs out. */
md_client_counts *md_client_counts_new(void);
void md_client_counts_free(md_client_counts *t); /* NULL: nothing */

/* The client's key for ss (never 0). */
uint64_t md_client_key(const md_client_counts *t, const struct sockaddr_storage *ss);
/* One more connection of key unless it has limit open already (or memory runs out): whether
 * it was counted. */
bool md_client_counts_add(md_client_counts *t, uint64_t key, uint32_t limit);
/* A connection of key, counted by md_client_counts_add(), has closed. */
void md_client_counts_remove(md_client_counts *t, uint64_t key);
/* Clients with a connection open (tests). */
uint32_t md_client_counts_clients(const md_client_counts *t);

#endif
