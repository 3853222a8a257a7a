/*
 * The runtime: what the workers share for one config generation (struct
 * lk_runtime below), its TLS contexts, broker health, learned nodes and
 * metrics series, and its references.
 */
#ifndef LK_RUNTIME_H
#define LK_RUNTIME_H

#include <stdint.h>
#include <openssl/ssl.h>

#include "lk_conf.h"

struct lk_dyn;
struct lk_health_checker;
struct lk_rt_stats;
struct lk_ticket_keys;

/*
 * State shared by the workers for one config generation: the config, the
 * TLS contexts built from it, and broker health.  Only atomics change.
 *
 * A SIGHUP builds a new generation beside the old one (lk_workers_reload).
 * Each worker, each client connection and each upstream connecting for one
 * holds a reference (refs), so a generation lives until its last exchange
 * ends.  Client connections move to the newest generation at an exchange
 * boundary only (lk_conn_renew): HTTP before each request and when a
 * parked connection wakes; Kafka and Pulsar connections, which have no
 * such boundary, stay on the generation they started on until they close.
 * What carries over: broker health, by broker name.  What does not: the
 * TLS session cache and lookout's own ticket keys (clients of before the
 * reload do one full handshake; tls.session_ticket_key files keep tickets
 * valid), round-robin cursors, idle upstream connections (dropped: their
 * key names the generation they were dialled for), and Kafka nodes learned from the brokers
 * (lk_dyn.h: learned again from the next Metadata response through the
 * new generation; their listeners close with the switch).
 */
struct lk_broker_health {
    unsigned fails;           /* consecutive connect failures (atomic) */
    long long retry_after_ms; /* skip for round-robin until then (atomic) */
    unsigned check_fails;     /* consecutive failed active checks (atomic) */
    int check_down;           /* the checks eject it until one passes (atomic) */
};

struct lk_runtime {
    struct lk_conf *conf;
    SSL_CTX **server_ctx; /* one per certificate, chosen by SNI; [0] is default */
    size_t nserver_ctx;
    SSL_CTX *client_ctx;  /* for TLS to brokers */
    struct lk_ticket_keys *tickets;  /* session ticket keys (lk_tls.c); NULL: no tickets */
    struct lk_client_auths *auths;   /* client certificates (lk_tls.c); NULL: not asked */
    struct lk_broker_health *health; /* by broker index */
    unsigned *rr;                    /* round-robin cursor by cluster index (atomic) */
    struct lk_dyn *dyn;              /* what the map gains at run time (lk_dyn.h) */
    uint64_t generation;             /* 1 for the config lookout started with, +1 per reload */
    int refs;                        /* atomic: lk_runtime_ref / lk_runtime_unref */
    struct lk_rt_stats *stats;       /* this generation's metrics series (lk_stats.h) */
    struct lk_health_checker *checker; /* active checks (lk_health.h); NULL: none running */
};

/* Builds the runtime (TLS contexts) for conf, with one reference.  NULL
 * with err on failure. */
struct lk_runtime *lk_runtime_new(struct lk_conf *conf, char *err, size_t errlen);
/* Frees rt now, whatever its references (before the workers run). */
void lk_runtime_free(struct lk_runtime *rt);
/* Takes a reference (from any thread); returns rt. */
struct lk_runtime *lk_runtime_ref(struct lk_runtime *rt);
/* Drops one; the last frees rt. */
void lk_runtime_unref(struct lk_runtime *rt);

#endif
