/* renew.c: the node certificate's renewal (Node.RenewCertificate).
 *
 * Node certificates expire (the controller's node_cert_lifetime_seconds,
 * a year by default). Once cert_renew_percent of its life has passed, this
 * thread asks for a new certificate for a new key over mTLS with the
 * current one, writes the pair (join_renew), and tells main, which restarts
 * bcd on it: the shared mTLS client is built once, from the files. Until
 * then every failure is retried with backoff and logged as a warning that
 * says how long the certificate has left; after it expired, an error: the
 * controller refuses the node and the operator must join it again.
 *
 * A node without a tunnel certificate (joined before Agent.Tunnel) renews
 * at once: the answer carries one for the new key. */
#include "agent/renew.h"

#include <inttypes.h>
#include <string.h>

#include "log.h"
#include "pki.h"
#include "util.h"

#define RETRY_MIN_MS 1000
#define RETRY_MAX_MS (5 * 60 * 1000)
#define SLEEP_MAX_MS (60 * 60 * 1000)   /* look again at least hourly */

int64_t renew_due_ms(int64_t issued_ms, int64_t not_after_ms, unsigned percent)
{
	int64_t life = not_after_ms - issued_ms;

	if (life <= 0)
		return issued_ms;
	return issued_ms + life / 100 * (int64_t)percent + life % 100 * (int64_t)percent / 100;
}

/* Sleep until due (in bounded steps); true if stopped. */
static bool wait_until(struct renew *r, int64_t due)
{
	for (int64_t left; (left = due - now_ms()) > 0;)
		if (backoff_sleep(r->stop, left < SLEEP_MAX_MS ? left : SLEEP_MAX_MS))
			return true;
	return backoff_stopped(r->stop);
}

static void log_failure(const bc_error *err, int64_t not_after)
{
	int64_t left = not_after - now_ms();

	if (left <= 0)
		log_error("certificate: expired %" PRId64 " s ago and not renewed (%s: %s): the "
			  "controller refuses this node; join it again with a new token",
			  -left / 1000, bc_code_name(err->code), err->message);
	else
		log_warn("certificate: renewal failed (%s: %s); it expires in %" PRId64 " s; "
			 "retrying", bc_code_name(err->code), err->message, left / 1000);
}

void renew_run(struct renew *r)
{
	int64_t issued = 0, not_after = 0, due;
	struct backoff b;

	if (pki_cert_validity(r->creds->cert_pem, &issued, &not_after) < 0) {
		log_error("certificate: %s/%s unreadable: never renewed", r->state_dir,
			  JOIN_CERT_FILE);
		return;
	}
	due = renew_due_ms(issued, not_after, r->percent);
	if (join_tunnel_wanted(r->state_dir, r->creds)) {
		log_info("certificate: no tunnel certificate (%s) yet: renewing now to get one",
			 JOIN_TUNNEL_CERT_FILE);
		due = now_ms();
	}
	log_info("certificate: expires in %" PRId64 " s, renewed in %" PRId64 " s",
		 (not_after - now_ms()) / 1000, due > now_ms() ? (due - now_ms()) / 1000 : 0);
	if (wait_until(r, due))
		return;
	backoff_init(&b, RETRY_MIN_MS, RETRY_MAX_MS);
	for (;;) {
		bc_error err = {0};
		if (join_renew(r->state_dir, r->client, r->creds, &err) == 0)
			break;
		log_failure(&err, not_after);
		if (backoff_sleep(r->stop, backoff_next(&b)))
			return;
	}
	log_info("certificate: renewed; bcd restarts to use it (instances keep running)");
	r->renewed(r->ctx);
}
