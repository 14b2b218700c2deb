/* join.h: enrolment (Node.Join) and the node's mTLS credentials. */
#ifndef BC_AGENT_JOIN_H
#define BC_AGENT_JOIN_H

#include <stdbool.h>

#include "bc/node/v1/node.pb-c.h"
#include "config.h"
#include "err.h"
#include "rpc.h"

/* Files in state_dir. node.pem is written last: its presence means "joined". */
#define JOIN_KEY_FILE "node.key"
#define JOIN_CERT_FILE "node.pem"
#define JOIN_CA_FILE "ca.pem"
#define JOIN_NODE_ID_FILE "node.id"
#define JOIN_POOL_ID_FILE "pool.id"
/* A renewal's new pair, renamed over node.key and node.pem once whole. */
#define JOIN_RENEW_KEY_FILE "renew.key"
#define JOIN_RENEW_CERT_FILE "renew.pem"
/* The tunnel certificate for node.key (serverAuth, SAN = node id, node
 * CA): Agent.Tunnel serves with it. A renewal writes renew-tunnel.pem
 * (empty when the controller sent none) before renew.pem; finishing it
 * renames it over tunnel.pem (or removes both when empty, and writes
 * tunnel.none: the controller gives none, so bcd does not renew at start
 * for it). */
#define JOIN_TUNNEL_CERT_FILE "tunnel.pem"
#define JOIN_RENEW_TUNNEL_FILE "renew-tunnel.pem"
#define JOIN_TUNNEL_NONE_FILE "tunnel.none"

/* The node's identity and mTLS material; every string owned. */
struct join_creds {
	char *node_id;
	char *pool_id;
	char *cert_pem;
	char *key_pem;   /* wiped on free */
	char *ca_pem;    /* the API CA: the controller is trusted with it alone */
	char *tunnel_cert_pem; /* NULL: none (a controller before Agent.Tunnel) */
};

/* Load the credentials of a joined node, first finishing a renewal a stop
 * interrupted. 0; -ENOENT if state_dir holds no node.pem (not joined yet);
 * another -errno if a file is missing or broken. */
int join_load(const char *state_dir, struct join_creds *ret);

/* Write a Join answer and our key to state_dir atomically, node.pem last.
 * ca_fallback is used as ca.pem if the answer carries no bundle. 0 or
 * -errno (-EBADMSG for an unusable answer: nothing is written then). */
int join_save(const char *state_dir, const Bc__Node__V1__JoinResponse *resp, const char *key_pem,
	      const char *ca_fallback);

/* Generate a key and CSR, call Node.Join over TLS trusting cfg->ca_file
 * (no client certificate), save the answer, fill *ret. 0, or -BC_EDOMAIN
 * with err (refusal or transport error: nothing written), or -errno with
 * err filled as INTERNAL. */
int join_enrol(const struct agent_config *cfg, struct join_creds *ret, bc_error *err);

/* Drop from ca.pem (and c->ca_pem) every CA that issued the node's own
 * certificate: the node CA, which an older bcd kept beside the API CA, so
 * any node's certificate passed for the controller's. *ret_dropped: how
 * many (0: nothing written). -ENOKEY when nothing but the node CA is left
 * (nothing written: bcd must not start), another -errno on failure. */
int join_repair_ca(const char *state_dir, struct join_creds *c, int *ret_dropped);

/* Node.RenewCertificate over cl (mTLS with c): a new key and certificate
 * for the same node, written to state_dir (renew.key/renew.pem renamed over
 * node.key/node.pem). c is not changed: the new pair is used from the next
 * start. 0, or -BC_EDOMAIN with err (nothing written), or -errno with err
 * filled as INTERNAL. */
int join_renew(const char *state_dir, rpc_client *cl, const struct join_creds *c,
	       bc_error *err);

/* True if a renewal now would bring a tunnel certificate this node lacks:
 * none is held and the controller did not answer the last renewal without
 * one (tunnel.none). */
bool join_tunnel_wanted(const char *state_dir, const struct join_creds *c);

/* True for an error worth retrying (controller unreachable or busy). */
bool join_err_transient(const bc_error *err);

/* True if the controller refuses this node's certificate: ACCESS_DENIED
 * with reason node-retired, or UNAUTHENTICATED. */
bool join_err_retired(const bc_error *err);

/* The mTLS client every call after Join uses. NULL on failure. */
rpc_client *join_client_new(const struct agent_config *cfg, const struct join_creds *creds);

/* Free and wipe. NULL-safe; leaves *c zeroed. */
void join_creds_free(struct join_creds *c);

#endif
