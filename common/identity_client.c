/* identity_client.c: the recognition cache of identity_client.h: a small
 * array under a mutex (an enforcement point asks about few addresses at a
 * time; a linear scan of a few hundred entries costs less than the call it
 * saves). */
#include "identity_client.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bc/compute/v1/identity.pb-c.h"

struct idc_slot {
	struct idc_answer a;
	int64_t expires_ms, stored_ms;
	int used;
};

struct idc_cache {
	pthread_mutex_t lock;
	struct idc_slot *slots;
	size_t n;
	int max_seconds;
};

struct idc_cache *idc_new(size_t capacity, int max_seconds)
{
	struct idc_cache *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	c->n = capacity ? capacity : 1;
	c->slots = calloc(c->n, sizeof(*c->slots));
	if (!c->slots) {
		free(c);
		return NULL;
	}
	c->max_seconds = max_seconds < 0 ? 0 : max_seconds > IDC_MAX_SECONDS ? IDC_MAX_SECONDS
									      : max_seconds;
	pthread_mutex_init(&c->lock, NULL);
	return c;
}

void idc_free(struct idc_cache *c)
{
	if (!c)
		return;
	pthread_mutex_destroy(&c->lock);
	free(c->slots);
	free(c);
}

/* The slot of address, or NULL. Caller holds the lock. */
static struct idc_slot *find(struct idc_cache *c, const char *address)
{
	for (size_t i = 0; i < c->n; i++)
		if (c->slots[i].used && strcmp(c->slots[i].a.address, address) == 0)
			return &c->slots[i];
	return NULL;
}

/* A free slot, else the one stored longest ago. Caller holds the lock. */
static struct idc_slot *victim(struct idc_cache *c)
{
	struct idc_slot *v = &c->slots[0];

	for (size_t i = 0; i < c->n; i++) {
		if (!c->slots[i].used)
			return &c->slots[i];
		if (c->slots[i].stored_ms < v->stored_ms)
			v = &c->slots[i];
	}
	return v;
}

void idc_put(struct idc_cache *c, const struct idc_answer *a, int64_t cache_seconds,
	     int64_t now_ms)
{
	int64_t secs = cache_seconds < c->max_seconds ? cache_seconds : c->max_seconds;
	struct idc_slot *s;

	if (secs <= 0 || !*a->address)
		return;
	pthread_mutex_lock(&c->lock);
	if (!(s = find(c, a->address)))
		s = victim(c);
	s->a = *a;
	s->stored_ms = now_ms;
	s->expires_ms = now_ms + secs * 1000;
	s->used = 1;
	pthread_mutex_unlock(&c->lock);
}

int idc_get(struct idc_cache *c, const char *address, int64_t now_ms, struct idc_answer *ret)
{
	struct idc_slot *s;
	int hit = 0;

	pthread_mutex_lock(&c->lock);
	s = find(c, address);
	if (s && now_ms < s->expires_ms) {
		*ret = s->a;
		hit = 1;
	} else if (s) {
		s->used = 0; /* expired: never answered again */
	}
	pthread_mutex_unlock(&c->lock);
	return hit;
}

void idc_forget(struct idc_cache *c, const char *address)
{
	struct idc_slot *s;

	pthread_mutex_lock(&c->lock);
	if ((s = find(c, address)))
		s->used = 0;
	pthread_mutex_unlock(&c->lock);
}

int idc_recognize(struct idc_cache *c, rpc_client *client, const char *address,
		  int64_t now_ms, int timeout_ms, struct idc_answer *ret, bc_error *err)
{
	Bc__Compute__V1__RecognizeRequest q = BC__COMPUTE__V1__RECOGNIZE_REQUEST__INIT;
	Bc__Compute__V1__Recognition *a = NULL;
	struct idc_answer got = {0};
	char path[96];
	int r;

	if (idc_get(c, address, now_ms, ret))
		return 1;
	q.address = (char *)address;
	if ((r = rpc_method_path(&bc__compute__v1__identity__descriptor, "Recognize", path,
				 sizeof(path))) < 0)
		return bc_error_set(err, BC_INTERNAL, "no Identity.Recognize method (%d)", r);
	if (rpc_client_unary(client, path, &q.base, &bc__compute__v1__recognition__descriptor,
			     (ProtobufCMessage **)&a, timeout_ms, err) < 0)
		return err->code == BC_NOT_FOUND ? 0 : -BC_EDOMAIN;
	snprintf(got.address, sizeof(got.address), "%s", address);
	snprintf(got.sandbox_id, sizeof(got.sandbox_id), "%s", a->sandbox_id);
	snprintf(got.tenant_id, sizeof(got.tenant_id), "%s", a->tenant_id);
	snprintf(got.epoch_id, sizeof(got.epoch_id), "%s", a->epoch_id);
	snprintf(got.agent, sizeof(got.agent), "%s", a->agent);
	snprintf(got.task, sizeof(got.task), "%s", a->task);
	snprintf(got.run, sizeof(got.run), "%s", a->run);
	idc_put(c, &got, a->cache_seconds, now_ms);
	protobuf_c_message_free_unpacked(&a->base, NULL);
	*ret = got;
	return 1;
}
