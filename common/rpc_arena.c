/* rpc_arena.c: the call-scoped allocator. Handlers build responses with
 * rpc_alloc()/rpc_strdup()/rpc_new(); everything is freed in one go when the
 * call ends, so a handler never frees a response it returned. */
#include "rpc_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ARENA_CHUNK 4096
#define ARENA_ALIGN 16

struct rpc_arena_chunk {
	struct rpc_arena_chunk *next;
	size_t used, cap;
	_Alignas(ARENA_ALIGN) unsigned char data[];
};

static struct rpc_arena_chunk *chunk_new(size_t cap)
{
	struct rpc_arena_chunk *ch = calloc(1, sizeof(*ch) + cap);

	if (!ch)
		abort();
	ch->cap = cap;
	return ch;
}

/* Returns zeroed, 16-byte aligned memory owned by the arena. Large blocks
 * get a chunk of their own, linked behind the current one. */
void *rpc_arena_alloc(struct rpc_arena *a, size_t n)
{
	struct rpc_arena_chunk *ch = a->head;
	size_t need = (n + ARENA_ALIGN - 1) & ~(size_t)(ARENA_ALIGN - 1);

	if (need < n)
		abort();
	if (need > ARENA_CHUNK / 4) {
		ch = chunk_new(need);
		ch->used = need;
		if (a->head) {
			ch->next = a->head->next;
			a->head->next = ch;
		} else {
			a->head = ch;
		}
		return ch->data;
	}
	if (!ch || ch->cap - ch->used < need) {
		ch = chunk_new(ARENA_CHUNK);
		ch->next = a->head;
		a->head = ch;
	}
	ch->used += need;
	return ch->data + ch->used - need;
}

/* Copy of the first n bytes of s, NUL-terminated, owned by the arena. */
char *rpc_arena_strndup(struct rpc_arena *a, const char *s, size_t n)
{
	char *p = rpc_arena_alloc(a, n + 1);

	memcpy(p, s, n);
	p[n] = '\0';
	return p;
}

/* Free every chunk; the arena is empty and reusable afterwards. */
void rpc_arena_free(struct rpc_arena *a)
{
	struct rpc_arena_chunk *ch = a->head, *next;

	for (; ch; ch = next) {
		next = ch->next;
		free(ch);
	}
	a->head = NULL;
}

/* Call-scoped allocation; see rpc.h. */
void *rpc_alloc(rpc_call *call, size_t n)
{
	return rpc_arena_alloc(&call->arena, n);
}

/* Call-scoped strdup; NULL in, NULL out. */
char *rpc_strdup(rpc_call *call, const char *s)
{
	return s ? rpc_arena_strndup(&call->arena, s, strlen(s)) : NULL;
}

/* A message of descriptor d, initialised, owned by the call. */
void *rpc_new(rpc_call *call, const ProtobufCMessageDescriptor *d)
{
	void *m = rpc_arena_alloc(&call->arena, d->sizeof_message);

	protobuf_c_message_init(d, m);
	return m;
}
