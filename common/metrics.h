/* metrics.h: a small Prometheus text endpoint (GET /metrics over plain
 * HTTP/1.x), for daemons that have no other HTTP server. The daemon renders
 * its own figures into a FILE on every scrape. */
#ifndef BC_METRICS_H
#define BC_METRICS_H

#include <stdio.h>

typedef struct metrics_srv metrics_srv;

/* Writes the exposition text to out (one scrape). */
typedef void (*metrics_render_fn)(FILE *out, void *arg);

/* Serve on listen ("127.0.0.1:9464", "[::1]:9464", ":9464" or "9464" for
 * 127.0.0.1; port 0 picks one) from a thread of its own, with non-blocking
 * I/O and a deadline per connection. *ret_port gets the bound port. NULL
 * with *ret_errno. */
metrics_srv *metrics_serve(const char *listen, metrics_render_fn fn, void *arg, int *ret_port,
			   int *ret_errno);

/* Stop the thread, close the socket, free. NULL-safe. */
void metrics_stop(metrics_srv *m);

/* One sample line: "name{labels} value\n"; labels may be NULL. */
void metrics_line(FILE *out, const char *name, const char *labels, double value);
/* "# HELP name text\n# TYPE name type\n" */
void metrics_head(FILE *out, const char *name, const char *type, const char *help);

#endif
