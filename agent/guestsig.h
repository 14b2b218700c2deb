/* guestsig.h: the guest-up signal, bcd's side (docs/sandboxes.md, "How
 * bcd knows the guest is up"; the wire: common/guest_ready.h).
 *
 * One thread serves BC_GUEST_READY_PORT on the applied spec's IPAM gateway
 * address (the host's address on the instances' bridge). A request
 * "POST /bc/ready/<id>" counts only when its source address is the address
 * of exactly one instance of the applied spec, that instance is <id>, it
 * runs, and this boot was not marked up yet; bcd then connects to the
 * guest's port 22 from the gateway address (a few tries over ~10 s) and
 * only when sshd answers marks the instance up (gr_mark) and asks for a
 * converge pass (a warm instance waits for that mark to be paused).
 * Everything else is answered 4xx, counted by result and logged once per
 * (instance, result). */
#ifndef BC_AGENT_GUESTSIG_H
#define BC_AGENT_GUESTSIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "runtime.h"

enum gs_result {
	GS_ACCEPTED,        /* marked up: the guest's sshd answered */
	GS_MALFORMED,       /* not "POST /bc/ready/<id>", too long, or too slow (2 s) */
	GS_UNKNOWN_SOURCE,  /* the source is not the address of exactly one instance */
	GS_OTHER_INSTANCE,  /* the source's instance is not the one in the path */
	GS_EARLY,           /* the instance does not run (yet) */
	GS_REPEATED,        /* this boot was already marked (or is being checked) */
	GS_NO_SSH,          /* the guest's port 22 never answered (~10 s) */
	GS_RESULTS
};

/* "accepted", "malformed", "unknown-source", "other-instance", "early",
 * "repeated", "no-ssh". */
const char *gs_result_name(enum gs_result r);

/* The longest request (request line and headers) read. */
#define GS_REQUEST_MAX 1024

/* Parse the start of a request, len bytes of buf: 1 when the request line
 * and the headers (up to the empty line) are whole and the request line is
 * "POST /bc/ready/<id> HTTP/1.x" with id 1..RT_ID_MAX characters of
 * [A-Za-z0-9_-] (copied to id), 0 when more bytes are needed, -1 when it
 * is malformed (or longer than GS_REQUEST_MAX). Pure. */
int gs_parse(const char *buf, size_t len, char id[RT_ID_MAX + 1]);

/* One address of one instance of the applied spec (conv_guests). */
struct gs_addr {
	const char *id;
	const char *addr;    /* textual IPv4 or IPv6 */
	const char *state;   /* as the last pass published: "running", ... */
};

/* The one instance whose address src is (compared as addresses, not
 * text), or NULL when no instance or more than one has it. Pure. */
const struct gs_addr *gs_source(const struct gs_addr *v, size_t n, const char *src);

/* The attribution rule. src: the request's source address (textual);
 * id: the instance the path names; marked: that instance's boot was
 * already marked up (or is being checked). GS_UNKNOWN_SOURCE unless src is
 * an address of exactly one instance (addresses compared as addresses, not
 * text), GS_OTHER_INSTANCE if that instance is not id, GS_EARLY if it does
 * not run, GS_REPEATED if marked, else GS_ACCEPTED (to be confirmed by
 * the ssh check). Pure. */
enum gs_result gs_attribute(const struct gs_addr *v, size_t n, const char *src, const char *id,
			    bool marked);

struct conv;
struct guestready;
struct guestsig;

/* gs_source over the applied spec's instances (conv_guests): true with
 * the instance's id in ret_id when src is the address of exactly one; the
 * spec's gateway in ret_gw (64 bytes; NULL: not wanted) either way. Any
 * thread (agent/identity_ep.c uses it too). */
bool gs_source_instance(struct conv *c, const char *src, char ret_id[RT_ID_MAX + 1],
			char ret_gw[64]);

/* A non-blocking listening socket on gw (dotted quad) tcp port, with
 * IP_FREEBIND (the bridge's address need not be up yet): the fd, with the
 * address in *ret_addr, or -errno (-EINVAL: gw is not an IPv4 address). */
struct in_addr;
int gs_listen(const char *gw, uint16_t port, struct in_addr *ret_addr);

struct gs_opts {
	struct conv *conv;        /* the applied spec and the instances' states */
	struct guestready *gr;    /* where the marks go */
	uint16_t port;            /* 0: BC_GUEST_READY_PORT */
	uint16_t ssh_port;        /* 0: 22 (the check that sshd answers) */
};

/* Start the listener thread. 0 or -errno (the thread could not start);
 * binding waits for the spec's gateway and is retried every second. */
int gs_start(const struct gs_opts *o, struct guestsig **ret);
/* Stop and join the thread, close everything. NULL-safe. */
void gs_stop(struct guestsig *g);
/* bcd_guest_ready_signals_total{result=...}. NULL: nothing. */
void gs_metrics_render(FILE *out, struct guestsig *g);
/* One counter (tests). */
uint64_t gs_count(struct guestsig *g, enum gs_result r);

#endif
