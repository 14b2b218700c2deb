/* converge_status.c: what the converge thread found, read by the report
 * thread (conv_snapshot), the tunnel (conv_tunnel_target) and the
 * metadata server (conv_guests), and command results waiting to be
 * reported (conv_add_result). */
#include "converge_int.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "guestready.h"
#include "state.h"
#include "log.h"
#include "net.h"
#include "netlink.h"
#include "util.h"
#include "volumes.h"

/* ---------------------------------------------------------- snapshots */

void conv_snapshot(struct conv *c, struct conv_status *ret)
{
	struct conv_status s;
	size_t n;

	pthread_mutex_lock(&c->lock);
	s = c->status;
	n = c->n_items + c->n_gone;
	s.items = xcalloc(n ? n : 1, sizeof(*s.items));
	if (c->n_items)
		memcpy(s.items, c->items, c->n_items * sizeof(*s.items));
	for (size_t i = 0; i < c->n_gone; i++)
		s.items[c->n_items + i] = c->gone[i].item;
	s.n_items = n;
	s.results = xcalloc(c->n_results ? c->n_results : 1, sizeof(*s.results));
	for (size_t i = 0; i < c->n_results; i++)
		s.results[i] = c->results[i].result;
	s.n_results = c->n_results;
	pthread_mutex_unlock(&c->lock);
	if (n > 1)
		qsort(s.items, n, sizeof(*s.items), cmp_item);
	*ret = s;
}

void conv_status_clear(struct conv_status *s)
{
	free(s->items);
	free(s->results);
	*s = (struct conv_status){0};
}

void conv_report_sent(struct conv *c, uint64_t seq)
{
	size_t k = 0;

	pthread_mutex_lock(&c->lock);
	c->contact_ms = mono_ms();
	if (seq > c->reported_seq)
		c->reported_seq = seq;
	wake_if_fenced(c);
	for (size_t i = 0; i < c->n_gone; i++)
		if (c->gone[i].seq > seq)
			c->gone[k++] = c->gone[i];
	c->n_gone = k;
	k = 0;
	for (size_t i = 0; i < c->n_results; i++)
		if (c->results[i].seq > seq)
			c->results[k++] = c->results[i];
	c->n_results = k;
	pthread_mutex_unlock(&c->lock);
}

void conv_add_result(struct conv *c, const char *id, bool ok, const char *error)
{
	struct once_result *r;

	pthread_mutex_lock(&c->lock);
	c->results = grow(c->results, &c->cap_results, c->n_results, sizeof(*c->results));
	r = &c->results[c->n_results++];
	*r = (struct once_result){0};
	snprintf(r->result.id, sizeof(r->result.id), "%s", id);
	r->result.ok = ok;
	snprintf(r->result.error, sizeof(r->result.error), "%s", error ? error : "");
	r->seq = ++c->status.seq;
	pthread_cond_broadcast(&c->changed);
	pthread_mutex_unlock(&c->lock);
}

/* See converge.h. */
int conv_tunnel_target(struct conv *c, const char *id, struct conv_target *ret)
{
	const Bc__Node__V1__InstanceSpec *in = NULL;
	int e = -ENOENT;

	memset(ret, 0, sizeof(*ret));
	pthread_mutex_lock(&c->lock);
	for (size_t i = 0; c->spec && i < c->spec->n_instances && !in; i++)
		if (strcmp(c->spec->instances[i]->id, id) == 0)
			in = c->spec->instances[i];
	if (in && in->desired_state != BC__NODE__V1__DESIRED_STATE__DESIRED_DELETED) {
		e = 0;
		ret->desired = (int)in->desired_state;
		for (size_t i = 0; i < in->n_nics && !ret->guest[0]; i++)
			snprintf(ret->guest, sizeof(ret->guest), "%s", in->nics[i]->ipv4);
		snprintf(ret->host, sizeof(ret->host), "%s", c->spec->ipam_gateway);
		for (size_t i = 0; i < c->n_items; i++)
			if (strcmp(c->items[i].id, id) == 0)
				snprintf(ret->state, sizeof(ret->state), "%s", c->items[i].state);
	}
	pthread_mutex_unlock(&c->lock);
	return e;
}

/* See converge.h. */
void conv_guests(struct conv *c, char gw[64], struct conv_guest **ret, size_t *ret_n)
{
	struct conv_guest *v = NULL;
	size_t n = 0, cap = 0;

	gw[0] = '\0';
	pthread_mutex_lock(&c->lock);
	if (c->spec && c->spec->ipam_gateway)
		snprintf(gw, 64, "%s", c->spec->ipam_gateway);
	for (size_t i = 0; c->spec && i < c->spec->n_instances; i++) {
		const Bc__Node__V1__InstanceSpec *in = c->spec->instances[i];
		const char *state = "";

		if (in->desired_state == BC__NODE__V1__DESIRED_STATE__DESIRED_DELETED)
			continue;
		for (size_t k = 0; k < c->n_items; k++)
			if (strcmp(c->items[k].id, in->id) == 0)
				state = c->items[k].state;
		for (size_t k = 0; k < in->n_nics; k++) {
			const char *a[2] = {in->nics[k]->ipv4, in->nics[k]->ipv6};

			for (int j = 0; j < 2; j++) {
				if (!a[j] || !*a[j])
					continue;
				v = grow(v, &cap, n, sizeof(*v));
				snprintf(v[n].id, sizeof(v[n].id), "%s", in->id);
				snprintf(v[n].addr, sizeof(v[n].addr), "%s", a[j]);
				snprintf(v[n].state, sizeof(v[n].state), "%s", state);
				snprintf(v[n].idref, sizeof(v[n].idref), "%s",
					 in->identity_bootstrap_ref ? in->identity_bootstrap_ref : "");
				n++;
			}
		}
	}
	pthread_mutex_unlock(&c->lock);
	*ret = v;
	*ret_n = n;
}
