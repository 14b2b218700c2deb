/* nodespec.h: a node's full desired state, built from the database. */
#ifndef BC_CTL_NODESPEC_H
#define BC_CTL_NODESPEC_H

#include "bc/node/v1/node.pb-c.h"
#include "db.h"
#include "err.h"

/* *ret is heap-allocated; free with protobuf_c_message_free_unpacked(). */
int nodespec_build(struct db *d, const char *node_id, Bc__Node__V1__NodeSpec **ret,
		   bc_error *err);

#endif
