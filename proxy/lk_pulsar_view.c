/*
 * The Pulsar command view (lk_pulsar_view.h): one decode, the URL pairs
 * read once, and one re-encode only when a filter edited something.
 */
#include <stdint.h>
#include <string.h>

#include "lk_pulsar_view.h"

void
lk_pulsar_view_init(struct lk_pulsar_view *v, int type, const uint8_t *frame, size_t len,
                    const struct lk_pulsar_cmd *c, struct lk_pool *pool)
{
    uint32_t total, cmd_size;

    memset(v, 0, sizeof(*v));
    v->type = type;
    v->pool = pool;
    v->edit.proxy_through = -1;
    if (lk_pulsar_type_addrs(type) != LK_PULSAR_ADDRS_DECODED)
        return; /* a type lookout does not know: the leak guard's */
    if (len < LK_PULSAR_PREFIX || lk_pulsar_sizes(frame, UINT32_MAX, &total, &cmd_size) != 0 ||
        (size_t)total + 4 != len || (size_t)cmd_size + LK_PULSAR_PREFIX != len)
        return; /* not a simple frame: nothing of lookout's */
    v->bytes = frame + LK_PULSAR_PREFIX;
    v->len = cmd_size;
    if (c != NULL)
        v->cmd = *c;
    else if (lk_pulsar_decode(v->bytes, v->len, &v->cmd) != 0) {
        v->state = LK_PULSAR_VIEW_MALFORMED;
        return;
    }
    v->state = LK_PULSAR_VIEW_DECODED;
    if (v->cmd.npairs == 0)
        return; /* a Failed lookup, a close without a new owner */
    v->pairs = lk_palloc(pool, v->cmd.npairs * sizeof(*v->pairs));
    if (lk_pulsar_pairs(v->bytes, v->len, v->pairs, v->cmd.npairs) != (long)v->cmd.npairs)
        v->cmd.npairs = 0; /* not after a decode that counted them */
}

void
lk_pulsar_view_set_pair(struct lk_pulsar_view *v, size_t i, const struct lk_str *url,
                        const struct lk_str *url_tls)
{
    struct lk_pulsar_pair_edit *e;

    if (v->pair_edits == NULL) {
        v->pair_edits = lk_palloc(v->pool, v->cmd.npairs * sizeof(*e));
        memset(v->pair_edits, 0, v->cmd.npairs * sizeof(*e));
        v->edit.pairs = v->pair_edits;
        v->edit.npairs = v->cmd.npairs;
    }
    e = &v->pair_edits[i];
    e->set_url = e->set_url_tls = 1;
    e->url = url;
    e->url_tls = url_tls;
    v->edits++;
}

void
lk_pulsar_view_proxy_through(struct lk_pulsar_view *v, int on)
{
    v->edit.proxy_through = on;
    v->edits++;
}

int
lk_pulsar_view_encode(const struct lk_pulsar_view *v, struct evbuffer *out)
{
    if (v->edits == 0 || v->state != LK_PULSAR_VIEW_DECODED)
        return 0;
    return lk_pulsar_reencode(v->bytes, v->len, &v->edit, out);
}
