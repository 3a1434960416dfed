// conn.h — the connection guard of `lazyinfer serve`: deadlines per phase of a connection and
// load shedding, so that idle, slow and careless clients cannot hold the server's connections.
//
// libmicrohttpd only knows an inactivity timeout, which a client that sends one byte a second
// never reaches. The guard tracks every open connection (by socket) with its phase and a deadline:
//   IDLE     connected, or kept alive after a response, no request line yet   idle_s
//   HEADERS  request line received, headers coming                             header_s
//   BODY     headers received, body coming                                     body_s
//   BUSY     the request is being answered (the engine, a stream)             none
// A thread wakes at the nearest deadline and shuts the socket of every connection past its own
// (shutdown(2): libmicrohttpd sees the end of the stream and closes the connection as usual).
// Shedding: when a new connection makes more than shed_at open, the IDLE or HEADERS connection
// whose deadline is nearest is shut at once, so connections that send nothing cannot fill the
// cap; a new connection beyond max_open (all others busy answering) is refused (shut). Shut
// connections do not count: libmicrohttpd may take a moment to close them, and its own limit is
// set above max_open so that they never keep a new client out.
// Per client (per_client > 0): a connection is counted for its client address, known when it
// opens. When one makes more than per_client for its client, that client's own IDLE or HEADERS
// connection nearest its deadline is shed (as above, within the client); when none is, the next
// request on the new connection is refused (li_conn_admit: the server answers 503) rather than
// the socket reset, since every client behind one address (127.0.0.1, a proxy) shares the cap.
// A trusted proxy's connection is opened with no client: it carries many clients' requests, one
// at a time, each named only by its X-Forwarded-For header, known after the request line. It is
// counted for a client from that request's headers (li_conn_admit) to its end (back to IDLE), so
// a proxied client's count is its requests in progress, and being never idle while counted, a
// proxied client over its cap always gets 503.
// Refusals (server full, client over its cap) are counted, and logged as one summary line at most
// every LI_CONN_LOG_S seconds (a burst of 845 logged 845 lines).
// Not here: HTTP (server.c). Tested by tests/test_server_robust.py (idle sockets, slow headers,
// slow bodies, a client that still gets /health, the per-client cap direct and through a proxy).
#ifndef LI_SERVER_CONN_H
#define LI_SERVER_CONN_H

#include "../core/core.h"

typedef enum { LI_CONN_IDLE, LI_CONN_HEADERS, LI_CONN_BODY, LI_CONN_BUSY } li_conn_phase;

#define LI_CONN_ADDR_LEN 48  // a client address as text (INET6_ADDRSTRLEN and its NUL)
#define LI_CONN_LOG_S 10     // seconds between two log lines about refused connections

typedef struct {
    double idle_s, header_s, body_s;  // deadlines of the phases (> 0)
    int shed_at;     // open connections beyond which idle ones are shed (> 0)
    int max_open;    // open connections beyond which a new one is refused (>= shed_at)
    int per_client;  // connections (or proxied requests) of one client address; 0: no limit
} li_conn_limits;

typedef struct li_conn_guard li_conn_guard;
typedef struct li_conn li_conn;  // one tracked connection

li_status li_conn_guard_start(li_conn_guard **out, const li_conn_limits *lim);
void li_conn_guard_stop(li_conn_guard *g);  // joins the thread; NULL is a no-op

// A connection opened on socket fd (phase IDLE) from `client` (an address as text; NULL: a
// trusted proxy's, counted per request); NULL when out of memory (it is then not guarded).
li_conn *li_conn_open(li_conn_guard *g, int fd, const char *client);
// A request's headers are in: the connection is BUSY (until set otherwise) and, a trusted proxy's,
// counted for `client` (its X-Forwarded-For address) until the request ends. False when the
// client is over its cap and none of its connections is idle to shed: the request is refused
// (counted; the server answers 503). NULL c: true.
bool li_conn_admit(li_conn_guard *g, li_conn *c, const char *client);
// The connection closed: forgotten before its socket is closed (no fd is shut after reuse).
void li_conn_close(li_conn_guard *g, li_conn *c);
// Enters a phase; its deadline counts from now. IDLE ends a proxied request's count.
void li_conn_set_phase(li_conn_guard *g, li_conn *c, li_conn_phase phase);
// Connections open now (not shut); shut by a deadline, shed, and refused so far (NULL: not asked).
void li_conn_counts(li_conn_guard *g, int *open, int64_t *timed_out, int64_t *shed,
                    int64_t *refused);

#endif
