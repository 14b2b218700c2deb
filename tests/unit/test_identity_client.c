/* test_identity_client.c: the recognition cache's bound (identity_client.h):
 * an answer is kept at most min(its cacheSeconds, the cache's max), the max
 * is clamped to 10 s, NOT_FOUND is never kept, the oldest is evicted; and
 * idc_recognize against a real RPC server answering Identity.Recognize:
 * a hit makes no call, NOT_FOUND is asked again, a failure is not "nobody". */
#include "identity_client.h"

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "bc/compute/v1/identity.pb-c.h"
#include "rpc.h"
#include "tap.h"

static atomic_int calls;

static int h_recognize(rpc_call *call, const ProtobufCMessage *req, ProtobufCMessage **ret,
		       bc_error *err)
{
	const Bc__Compute__V1__RecognizeRequest *q = (const void *)req;
	Bc__Compute__V1__Recognition *a;

	atomic_fetch_add(&calls, 1);
	if (!strcmp(q->address, "10.0.0.9"))
		return bc_error_set(err, BC_UNAVAILABLE, "database down");
	if (strcmp(q->address, "10.0.0.5") != 0)
		return bc_error_set(err, BC_NOT_FOUND, "no live identity holds %s", q->address);
	a = rpc_new(call, &bc__compute__v1__recognition__descriptor);
	a->address = (char *)"10.0.0.5";
	a->sandbox_id = (char *)"sbx_live";
	a->tenant_id = (char *)"ten_a";
	a->epoch_id = (char *)"ide_1";
	a->agent = (char *)"coder";
	a->task = (char *)"t1";
	a->run = (char *)"r1";
	a->cache_seconds = 2;
	*ret = &a->base;
	return 0;
}

static const struct rpc_handler handlers[] = {
	{.method = "Recognize", .kind = RPC_UNARY, .fn.unary = h_recognize},
};

static void recognize_calls(void)
{
	struct rpc_server_opts so = {.listen = "127.0.0.1:0", .workers = 2};
	struct idc_cache *c = idc_new(8, IDC_DEFAULT_SECONDS);
	struct idc_answer got;
	rpc_server *s = rpc_server_new(&so, NULL);
	rpc_client *cl = NULL;
	char target[64];
	bc_error err;
	int port = 0;

	ok(s && rpc_server_add_service(s, &bc__compute__v1__identity__descriptor, handlers, 1) == 0 &&
	   rpc_server_start(s, &port) == 0, "a server answering Identity.Recognize");
	snprintf(target, sizeof(target), "127.0.0.1:%d", port);
	cl = rpc_client_new(&(struct rpc_client_opts){.target = target});
	is_int(idc_recognize(c, cl, "10.0.0.5", 1000, 5000, &got, &err), 1, "recognized");
	ok(!strcmp(got.sandbox_id, "sbx_live") && !strcmp(got.agent, "coder") &&
	   !strcmp(got.run, "r1") && !strcmp(got.address, "10.0.0.5"), "the answer's fields");
	is_int(atomic_load(&calls), 1, "one call");
	memset(&got, 0, sizeof(got));
	is_int(idc_recognize(c, cl, "10.0.0.5", 2999, 5000, &got, &err), 1, "asked again within 2 s");
	ok(!strcmp(got.sandbox_id, "sbx_live") && atomic_load(&calls) == 1,
	   "... answered from the cache, no call");
	is_int(idc_recognize(c, cl, "10.0.0.5", 3000, 5000, &got, &err), 1, "asked at 2 s");
	is_int(atomic_load(&calls), 2, "... the cache let it go: asked the server again");
	is_int(idc_recognize(c, cl, "10.0.0.6", 3000, 5000, &got, &err), 0, "nobody: 0");
	is_int(idc_recognize(c, cl, "10.0.0.6", 3001, 5000, &got, &err), 0, "nobody again");
	is_int(atomic_load(&calls), 4, "NOT_FOUND is not kept: asked each time");
	is_int(idc_recognize(c, cl, "10.0.0.9", 3000, 5000, &got, &err), -BC_EDOMAIN,
	       "a failed call is an error, not nobody");
	is_int(err.code, BC_UNAVAILABLE, "... with the server's code");
	rpc_client_free(cl);
	rpc_server_free(s, 0);
	idc_free(c);
}

static struct idc_answer ans(const char *addr, const char *sbx)
{
	struct idc_answer a = {0};

	snprintf(a.address, sizeof(a.address), "%s", addr);
	snprintf(a.sandbox_id, sizeof(a.sandbox_id), "%s", sbx);
	return a;
}

int main(void)
{
	struct idc_cache *c = idc_new(2, IDC_DEFAULT_SECONDS), *big = idc_new(4, 60);
	struct idc_answer a = ans("10.0.0.5", "sbx_a"), got;

	ok(c && big, "caches made");
	ok(!idc_get(c, "10.0.0.5", 0, &got), "empty: a miss");
	idc_put(c, &a, 2, 1000);
	ok(idc_get(c, "10.0.0.5", 2999, &got) && !strcmp(got.sandbox_id, "sbx_a"),
	   "kept just under 2 s");
	ok(!idc_get(c, "10.0.0.5", 3000, &got), "gone at 2 s: a revoked identity is honoured no longer");
	idc_put(c, &a, 5, 0);
	ok(!idc_get(c, "10.0.0.5", 2000, &got), "an answer asking 5 s is kept only the cache's 2 s");
	idc_put(big, &a, 60, 0);
	ok(idc_get(big, "10.0.0.5", 9999, &got), "a 60 s cache is clamped ...");
	ok(!idc_get(big, "10.0.0.5", 10000, &got), "... to 10 s");
	idc_put(c, &a, 0, 0);
	ok(!idc_get(c, "10.0.0.5", 0, &got), "cacheSeconds 0: not kept");
	idc_put(c, &a, 2, 0);
	idc_forget(c, "10.0.0.5");
	ok(!idc_get(c, "10.0.0.5", 1, &got), "forgotten on demand");
	{
		struct idc_answer b = ans("10.0.0.6", "sbx_b"), d = ans("10.0.0.7", "sbx_d");
		idc_put(c, &a, 2, 10);
		idc_put(c, &b, 2, 20);
		idc_put(c, &d, 2, 30);
		ok(!idc_get(c, "10.0.0.5", 31, &got), "full: the oldest is evicted");
		ok(idc_get(c, "10.0.0.6", 31, &got) && idc_get(c, "10.0.0.7", 31, &got),
		   "the others stay");
		b.sandbox_id[4] = 'X';
		idc_put(c, &b, 2, 40);
		ok(idc_get(c, "10.0.0.6", 41, &got) && !strcmp(got.sandbox_id, "sbx_X"),
		   "a new answer for an address replaces the old one");
	}
	idc_free(c);
	idc_free(big);
	idc_free(NULL);
	recognize_calls();
	done_testing();
}
