/* identity_ep.h: bcd's workload-identity endpoint (docs/identity.md, the
 * wire: common/guest_ready.h).
 *
 * One thread serves BC_IDENTITY_PORT on the applied spec's IPAM gateway,
 * as the guest-up signal does (guestsig.h), and attributes each request to
 * the instance whose address its source is (gs_source_instance: exactly
 * one instance, else refused; the tap guards make the source address
 * unspoofable). Four requests, HTTP/1.1, at most IE_REQUEST_MAX bytes
 * read within 2 s:
 *
 *   POST /bc/identity/attest     the bootstrap value -> Node.Attest
 *   POST /bc/identity/renew      the capability token -> Node.RenewIdentity
 *   POST /bc/identity/state      "running:TOKEN" or "idle:TOKEN" (the
 *                                harness's activity) -> Node.ReportActivity,
 *                                answered {sandboxId, lifecycle, changed}
 *   GET  /bc/identity/bootstrap  long-poll (IE_POLL_MS) for the value a
 *                                warm claim gave this instance
 *                                (InstanceSpec.identity_bootstrap_ref,
 *                                fetched with Node.GetBootData bound to the
 *                                instance, kept in memory only, handed out
 *                                once, then forgotten)
 *
 * bcd adds what only it knows (the instance behind the source address and
 * the address) and answers the controller's verdict as JSON: {epochId,
 * sandboxId, capabilityToken, leaseExpiresAt, renewAfterSeconds} or
 * {code, reason} with a 4xx/5xx. One request in flight per instance, a
 * per-instance rate limit; every refusal is counted by result
 * (bcd_identity_requests_total) and logged once per (instance, result).
 * While it runs, bcd advertises IE_CAPABILITY. */
#ifndef BC_AGENT_IDENTITY_EP_H
#define BC_AGENT_IDENTITY_EP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define IE_CAPABILITY "instance.identity"
#define IE_REQUEST_MAX 4096     /* request line, headers and body */
#define IE_BODY_MAX 256         /* a bootstrap value or a capability token */
#define IE_STATE_MAX 15         /* bytes of the state in "STATE:TOKEN" */
#define IE_POLL_MS 25000        /* the bootstrap long-poll's bound */
#define IE_RATE_BURST 10        /* requests an instance may send at once */
#define IE_RATE_REFILL_MS 6000  /* then one more every this long */

enum ie_route { IE_ROUTE_ATTEST, IE_ROUTE_RENEW, IE_ROUTE_BOOTSTRAP, IE_ROUTE_STATE };

struct ie_req {
	enum ie_route route;
	char body[IE_BODY_MAX + 1];   /* the value, NUL-terminated ("" for GET) */
};

/* Parse len bytes of buf: 1 when a whole request is there (request line,
 * headers, and exactly Content-Length bytes of body) and it is one of the
 * four above with HTTP/1.0 or 1.1, a POST's body 1..IE_BODY_MAX printable
 * ASCII bytes without spaces (one trailing newline allowed) and a GET
 * without a body, a state report's body "STATE:TOKEN" (STATE 1..IE_STATE_MAX
 * bytes, TOKEN not empty); 0 when more bytes are needed; -1 when it is malformed:
 * another method or path, a NUL byte, a bad, repeated or too large
 * Content-Length, Transfer-Encoding, bytes after the body, or more than
 * IE_REQUEST_MAX bytes. Pure. */
int ie_parse(const char *buf, size_t len, struct ie_req *ret);

/* A token bucket: IE_RATE_BURST requests, then one per IE_RATE_REFILL_MS.
 * Zeroed: full at the first take. */
struct ie_rate {
	bool started;
	int tokens;
	int64_t refill_at;   /* mono ms of the next token */
};
/* Take one token at now (mono ms): true if there was one. Pure. */
bool ie_rate_take(struct ie_rate *r, int64_t now);

enum ie_result {
	IE_ATTESTED,        /* Node.Attest answered: identity live */
	IE_RENEWED,         /* Node.RenewIdentity answered */
	IE_REPORTED,        /* Node.ReportActivity answered */
	IE_SERVED,          /* the warm bootstrap value was handed out */
	IE_NO_BOOTSTRAP,    /* the long-poll ended without one (204) */
	IE_MALFORMED,       /* not one of the requests above, or too slow */
	IE_UNKNOWN_SOURCE,  /* the source is not the address of exactly one instance */
	IE_BUSY,            /* another request of this instance is in flight */
	IE_RATE_LIMITED,    /* the instance's bucket is empty */
	IE_REFUSED,         /* the controller refused (its code and reason passed on) */
	IE_UNAVAILABLE,     /* the controller did not answer, or bcd is overloaded */
	IE_RESULTS
};

/* "attested", "renewed", "reported", "served", "no-bootstrap", "malformed",
 * "unknown-source", "busy", "rate-limited", "refused", "unavailable". */
const char *ie_result_name(enum ie_result r);

/* The HTTP status for a controller's code: 400 INVALID_INPUT, 403
 * ACCESS_DENIED, 404 NOT_FOUND, 409 CONFLICT and INVALID_STATE, 429
 * RESOURCE_EXHAUSTED, 503 anything else. Pure. */
int ie_http_status(int bc_code);

struct conv;
struct rpc_client;
struct identity_ep;

struct ie_opts {
	struct conv *conv;          /* the applied spec (addresses, gateway, refs) */
	struct rpc_client *client;  /* the agent's mTLS client to the controller */
	uint16_t port;              /* 0: BC_IDENTITY_PORT */
};

/* Start the listener thread and its workers. 0 or -errno; binding waits
 * for the spec's gateway and is retried every second. */
int ie_start(const struct ie_opts *o, struct identity_ep **ret);
/* Stop and join the threads, close everything, wipe held values.
 * NULL-safe. */
void ie_stop(struct identity_ep *e);
/* bcd_identity_requests_total{result=...}. NULL: nothing. */
void ie_metrics_render(FILE *out, struct identity_ep *e);
/* One counter (tests). */
uint64_t ie_count(struct identity_ep *e, enum ie_result r);

#endif
