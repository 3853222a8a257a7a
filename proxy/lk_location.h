/*
 * The Location logic (CONTRACT §4), pure over strings: an absolute URL whose
 * host:port is a listener address of a mapped broker becomes the same URL
 * on that broker's selected listener.
 */
#ifndef LK_LOCATION_H
#define LK_LOCATION_H

#include "lk_conf.h"
#include "lk_pool.h"
#include "lk_str.h"
#include "lk_urlparts.h"

/* lk_url_parts_split, and a URL without a port gets its scheme's default
 * (0 for a scheme lookout does not know). */
int lk_url_split(struct lk_str url, struct lk_url_parts *out);

/*
 * The broker of cl that an absolute URL names by any of its listener
 * addresses, or NULL.  parts gets the split URL and *scheme the scheme of
 * the matched address.
 */
const struct lk_broker *lk_url_find_broker(const struct lk_cluster *cl, struct lk_str url,
                                           struct lk_url_parts *parts, enum lk_scheme *scheme);

/*
 * The broker of cl that a Pulsar CONNECT's proxy_to_broker_url names by
 * any of its addresses, in either form clients send: "host:port" (the
 * Java, C++ and Go clients) or an absolute URL such as "pulsar://host:port".
 * NULL with *why set when the text is neither (a static string), NULL with
 * *why NULL when it is well formed but names no broker of cl.
 */
const struct lk_broker *lk_proxy_target_find(const struct lk_cluster *cl, struct lk_str target,
                                             const char **why);

/*
 * The address a client is given for broker b in the family of scheme
 * (http/https or pulsar/pulsar+ssl) when listener_name is selected: b's
 * address on lk_broker_client_listener (that listener, or b's lookup
 * listener when b lacks it; lk_listener_pick: a TLS client gets the TLS
 * scheme first).  In the web family only, when that listener has none (a
 * binary-only one, PIP-95), b's address on its lookupListenerName, else
 * the cluster's webServiceUrl: lookout's own entry point, which sends a
 * request to any broker with an internal web address, and a 307 from
 * there is given the same way.  *lacked (may be NULL) gets the name of the
 * listener that had no web address when one of those two is returned,
 * else NULL.  NULL when there is none, and always without a listener_name
 * (nothing is rewritten, CONTRACT §3).  Config memory.
 */
const struct lk_url *lk_location_pick(const struct lk_broker *b, const char *listener_name,
                                      enum lk_scheme scheme, int client_tls, const char **lacked);

/* How lk_location_rewrite rewrote a URL. */
struct lk_location_how {
    const struct lk_broker *broker; /* the broker the URL named */
    const struct lk_url *to;        /* the address it now names */
    const char *lacked;             /* lk_location_pick's: a fallback was taken */
};

/*
 * Rewrites url if its host:port is any listener address of a broker of cl:
 * the scheme and host:port become the broker's address that
 * lk_location_pick gives for listener_name, in the family of the address
 * the URL named; the rest stays byte for byte.  Returns 1 with *out in
 * pool memory (and *how filled when not NULL), or 0 when the URL is
 * relative, names no mapped broker, or there is no address to give.
 */
int lk_location_rewrite(struct lk_pool *pool, const struct lk_cluster *cl,
                        const char *listener_name, int client_tls, struct lk_str url,
                        struct lk_str *out, struct lk_location_how *how);

#endif
