/*
 * The HTTP/1.1 protocol module, as the connection layer sees it: one table
 * of operations, started on each connection accepted on an HTTP bind.  What
 * the module's files share among themselves is in lk_http_xchg.h.
 */
#ifndef LK_HTTP_H
#define LK_HTTP_H

struct lk_proto_ops;

extern const struct lk_proto_ops lk_proto_http;

#endif
