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
 * Rewrites url if its host:port is any listener address of a broker of cl:
 * the scheme and host:port become those of the broker's listener named
 * listener_name, or of its lookup listener when it lacks that one
 * (lk_broker_client_listener; same family; the client's TLS decides the
 * preference); the rest stays byte for byte.  Returns 1 with *out in pool memory, or 0 when
 * the URL is relative, names no mapped broker, or there is no listener.
 * *broker gets the matched broker when not NULL.
 */
int lk_location_rewrite(struct lk_pool *pool, const struct lk_cluster *cl,
                        const char *listener_name, int client_tls, struct lk_str url,
                        struct lk_str *out, const struct lk_broker **broker);

#endif
