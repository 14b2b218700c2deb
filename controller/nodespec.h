/* nodespec.h: a node's full desired state, built from the database (the
 * instances changed since the last build, or all of them). */
#ifndef BC_CTL_NODESPEC_H
#define BC_CTL_NODESPEC_H

#include <stdbool.h>

#include "bc/node/v1/node.pb-c.h"
#include "db.h"
#include "err.h"

/* A node's spec stream keeps its last build (nodeapi.c), so the next one
 * need read again only the instances changed since. */
struct nodespec_cache {
	Bc__Node__V1__NodeSpec *spec; /* owned; NULL: nothing built yet */
};

/* Build node_id's spec into c, *ret borrowing it (valid until the next
 * build or nodespec_cache_clear): whole when all is set or c holds no
 * build yet; otherwise the node's header and the instances named in dirty
 * (newline-separated; spec_take_changes) are read again and every other
 * instance is kept from c (the change rows say nothing else changed). A
 * failure leaves c as it was. */
int nodespec_build_delta(struct db *d, const char *node_id, struct nodespec_cache *c, bool all,
			 const char *dirty, Bc__Node__V1__NodeSpec **ret, bc_error *err);
void nodespec_cache_clear(struct nodespec_cache *c);

#endif
