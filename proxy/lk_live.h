/*
 * The live listener map: the clusters whose config names their store
 * (Pulsar's metadataStoreUrl or zookeeperServers, Kafka's
 * zookeeper.connect) have their brokers read from it, and every change
 * there becomes a new config generation, swapped in as a SIGHUP reload
 * is (lk_workers_reload): new exchanges take the new map, exchanges under
 * way finish on theirs.
 *
 * A generation is the config file's text, kept from the last load, built
 * again with each store's last snapshot (lk_conf_load_live), so the file
 * and the stores always meet the same rules and a store change never
 * re-reads a file nobody asked to reload.  Registrations that the map
 * cannot take are left out, logged once and counted; nothing a store holds
 * can stop the rest of the map from being served.  During a store outage
 * the last map keeps serving.
 *
 * Everything here runs on the main loop's thread (the sources deliver
 * there, lk_meta.h), except lk_live_check, which runs before any loop.
 */
#ifndef LK_LIVE_H
#define LK_LIVE_H

#include <stddef.h>
#include <stdio.h>

struct event_base;
struct evbuffer;
struct lk_conf;
struct lk_cluster;

/* Puts conf in service (a new runtime through lk_workers_reload, with
 * what follows a generation: health checks).  0, or -1 with a message. */
typedef int (*lk_live_install_fn)(struct lk_conf *conf, char *err, size_t errlen);

/*
 * Builds a generation from the file's text with the stores' last
 * snapshots (none before lk_live_start).  A registration that breaks the
 * map as a whole (its external address conflicts with a bind) is found by
 * adding them one by one, and left out like any refused one.  Returns the
 * config, or NULL with the file's own error.
 */
struct lk_conf *lk_live_build(const char *file, const char *text, size_t len, char *err,
                              size_t errlen);

/*
 * The same from given sets (each skip NULL: the fallback uses them), with
 * the sockets a map about to serve would add bound once for a test when
 * bindcheck is set.  Pure otherwise: the fuzzer's way in.
 */
struct lk_live_set;
struct lk_conf *lk_live_build_sets(const char *file, const char *text, size_t len,
                                   struct lk_live_set *sets, size_t n, int bindcheck, char *err,
                                   size_t errlen);

/*
 * Follows the stores of conf (just installed, built from file's text):
 * keeps the text for later builds, starts a source for each cluster with
 * a store, keeps those a reload left unchanged (same cluster, servers and
 * path) and stops the others.  On base: the main loop's.
 */
void lk_live_follow(struct event_base *base, const struct lk_conf *conf, const char *file,
                    const char *text, size_t len, lk_live_install_fn install);

/* Stops every source (at exit). */
void lk_live_stop(void);

/* The stores' state as /metrics shows it, for the map conf serves. */
void lk_live_metrics(struct evbuffer *out, const struct lk_conf *conf);

/* What /map shows of cluster cl's store (cl has one): where, whether
 * connected and read, the registrations and those refused now. */
struct json_t;
struct json_t *lk_live_store_json(const struct lk_cluster *cl);

/* The stores' lines of /healthz; returns 1 while some store has not been
 * read once since start (lookout is not ready: its map lacks the brokers). */
int lk_live_health(struct evbuffer *out, const struct lk_conf *conf);

/*
 * --check --live: reads every store of conf (built from file's text),
 * waiting for each up to its session timeout (a server that has not
 * answered by then would not keep a session either), and prints the map
 * as it stands with each broker marked static or live.  0 when every store
 * was read, 1 if not (with the reason on stderr).
 */
int lk_live_check(const struct lk_conf *conf, const char *file, const char *text, size_t len,
                  FILE *out);

#endif
