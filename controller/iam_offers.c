/* iam_offers.c: the operator's Offers service: a tenant's spend limit and
 * what a spent budget stops (quota.c: quota_budget decides it at create),
 * and which pools check budgets. Each change and its event commit
 * together. Spend is the usage the metering pass (meter.c) priced at the
 * offer's prices. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app.h"
#include "bc/admin/v1/iam.pb-c.h"
#include "db.h"
#include "iam_offers.h"
#include "iam_tenants.h"
#include "log.h"
#include "quota.h"
#include "rowmsg.h"
#include "util.h"
#include "validate.h"

#define OFFER_COLS                                                                    \
	"t.id, o.spend_limit_cents, coalesce(o.on_budget_exceeded, 'none'), (SELECT "      \
	"floor(coalesce(sum(cost_cents), 0))::bigint FROM usage u WHERE u.tenant_id = t.id), " \
	"(SELECT string_agg(key || '=' || value, E'\\n' ORDER BY key) FROM "              \
	"jsonb_each_text(o.prices))"
/* The columns of OFFER_COLS, in its order: the two must stay in step. */
enum {
	OFFER_TENANT_ID, OFFER_SPEND_LIMIT, OFFER_ON_BUDGET_EXCEEDED, OFFER_SPENT, OFFER_PRICES,
	OFFER_NCOLS
};
COLS_CHECK(OFFER_COLS, OFFER_NCOLS)
#define BUDGET_NAMES {"ok", "spent", "stop-new", "drain"}
#define PRICES_MAX 32
#define PRICE_MAX 1e12

/* "meter=cents" lines (as offers.prices reads back) into x->prices. */
static void offer_prices(rpc_call *c, Bc__Admin__V1__Offer *x, const char *lines)
{
	size_t n = 0;
	char *all, *line, *save = NULL;

	for (const char *p = lines; p && *p; p++)
		n += *p == '\n';
	if (!lines || !*lines)
		return;
	x->prices = rpc_alloc(c, (n + 1) * sizeof(*x->prices));
	all = rpc_strdup(c, lines);
	for (line = strtok_r(all, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		Bc__Admin__V1__Offer__PricesEntry *e;
		char *eq = strrchr(line, '=');

		if (!eq)
			continue;
		*eq = '\0';
		e = rpc_new(c, &bc__admin__v1__offer__prices_entry__descriptor);
		e->key = line;
		e->value = strtod(eq + 1, NULL);
		x->prices[x->n_prices++] = e;
	}
}

/* The prices as a JSON object for offers.prices: meters are
 * [a-z0-9._-]{1,64}, each once; prices finite, 0 to PRICE_MAX cents. */
static int prices_json(const Bc__Admin__V1__Offer *q, char **ret, bc_error *err)
{
	size_t len = 3 + q->n_prices * 96, used;
	char *json;

	if (q->n_prices > PRICES_MAX)
		return invalid(err, "prices", "at most %d prices", PRICES_MAX);
	for (size_t i = 0; i < q->n_prices; i++) {
		const char *k = q->prices[i]->key;
		double v = q->prices[i]->value;

		if (!*k || strlen(k) > 64 || strspn(k, "abcdefghijklmnopqrstuvwxyz0123456789._-") !=
		    strlen(k))
			return invalid(err, "prices", "prices: meter %.64s must be 1 to 64 of "
				       "[a-z0-9._-]", k);
		if (!(v >= 0 && v <= PRICE_MAX))
			return invalid(err, "prices", "prices.%s must be between 0 and %.0f cents",
				       k, PRICE_MAX);
		for (size_t j = 0; j < i; j++)
			if (strcmp(q->prices[j]->key, k) == 0)
				return invalid(err, "prices", "prices: meter %s given twice", k);
	}
	json = xcalloc(1, len);
	used = (size_t)snprintf(json, len, "{");
	for (size_t i = 0; i < q->n_prices; i++)
		used += (size_t)snprintf(json + used, len - used, "%s\"%s\": %.17g", i ? ", " : "",
					 q->prices[i]->key, q->prices[i]->value);
	snprintf(json + used, len - used, "}");
	*ret = json;
	return 0;
}

static Bc__Admin__V1__Offer *offer_row(rpc_call *c, const PGresult *r)
{
	Bc__Admin__V1__Offer *x = rpc_new(c, &bc__admin__v1__offer__descriptor);

	x->tenant_id = row_str(c, r, 0, OFFER_TENANT_ID);
	x->has_spend_limit_cents = db_val(r, 0, OFFER_SPEND_LIMIT) != NULL;
	x->spend_limit_cents = db_i64(r, 0, OFFER_SPEND_LIMIT);
	x->on_budget_exceeded = row_str(c, r, 0, OFFER_ON_BUDGET_EXCEEDED);
	x->spent_cents = db_i64(r, 0, OFFER_SPENT);
	offer_prices(c, x, db_val(r, 0, OFFER_PRICES));
	x->budget = (char *)"ok";
	return x;
}

/* The budget's state as periodic work sees it (quota_billing_check). */
static int offer_budget(rpc_call *c, Bc__Admin__V1__Offer *x, bc_error *err)
{
	static const char *const names[] = BUDGET_NAMES;
	enum quota_budget_state st;
	int rc = quota_billing_check(ctl_db(c), x->tenant_id, &st);

	if (rc < 0)
		return db_fail(err, rc);
	x->budget = (char *)names[st];
	return 0;
}

static int offer_get(rpc_call *c, const ProtobufCMessage *m, ProtobufCMessage **ret,
		     bc_error *err)
{
	const Bc__Admin__V1__GetOfferRequest *q = (const void *)m;
	Bc__Admin__V1__Offer *x;
	struct dbp p = {0};
	PGresult *r = NULL;
	int rc;

	dbp_str(&p, q->tenant_id);
	if ((rc = db_one(ctl_db(c), &r, "SELECT " OFFER_COLS " FROM tenants t LEFT JOIN offers o "
			  "ON o.tenant_id = t.id WHERE t.id = $1", &p, err,
			  "tenant %s not found", q->tenant_id)) < 0)
		return rc;
	x = offer_row(c, r);
	PQclear(r);
	if ((rc = offer_budget(c, x, err)) < 0)
		return rc;
	*ret = &x->base;
	return 0;
}

static int offer_set(rpc_call *c, const ProtobufCMessage *m, ProtobufCMessage **ret,
		     bc_error *err)
{
	const Bc__Admin__V1__Offer *q = (const void *)m;
	const char *mode = *q->on_budget_exceeded ? q->on_budget_exceeded : "none";
	struct iam_write w = {
		.sql = "WITH o AS (INSERT INTO offers (tenant_id, spend_limit_cents, "
		       "on_budget_exceeded, prices) SELECT id, $2::bigint, $3, $4::jsonb FROM tenants "
		       "WHERE id = $1 ON CONFLICT (tenant_id) DO UPDATE SET spend_limit_cents = "
		       "$2::bigint, on_budget_exceeded = $3, prices = $4::jsonb, updated_at = now() "
		       "RETURNING *) SELECT " OFFER_COLS " FROM o JOIN tenants t ON t.id = o.tenant_id",
		.conflict_reason = "", .ev_type = "offer.set", .subject_kind = "tenant",
		.ev = {.on_budget_exceeded = mode}};
	_cleanup_free_ char *prices = NULL;
	Bc__Admin__V1__Offer *x;
	PGresult *r = NULL;
	char msg[128];
	int rc;

	if (!str_is_slug(q->tenant_id, 63))
		return invalid(err, "tenantId", "tenantId must be a tenant id");
	if (strcmp(mode, "none") && strcmp(mode, "stop-new") && strcmp(mode, "drain"))
		return invalid(err, "onBudgetExceeded", "onBudgetExceeded must be none, stop-new or "
			       "drain");
	if (q->has_spend_limit_cents && q->spend_limit_cents < 0)
		return invalid(err, "spendLimitCents", "spendLimitCents must not be negative");
	if ((rc = prices_json(q, &prices, err)) < 0)
		return rc;
	snprintf(msg, sizeof(msg), "tenant %s not found", q->tenant_id);
	w.notfound_msg = msg;
	dbp_str(&w.p, q->tenant_id);
	if (q->has_spend_limit_cents)
		dbp_i64(&w.p, q->spend_limit_cents);
	else
		dbp_nstr(&w.p, NULL);
	dbp_str(&w.p, mode);
	dbp_str(&w.p, prices);
	if ((rc = iam_write_run(c, &w, &r, err)) < 0)
		return rc;
	x = offer_row(c, r);
	PQclear(r);
	if ((rc = offer_budget(c, x, err)) < 0)
		return rc;
	*ret = &x->base;
	log_info("tenant %s: offer set (on budget exceeded: %s)", q->tenant_id, mode);
	return 0;
}

static int offer_pool_check(rpc_call *c, const ProtobufCMessage *m, ProtobufCMessage **ret,
			    bc_error *err)
{
	const Bc__Admin__V1__SetPoolBudgetCheckRequest *q = (const void *)m;
	Bc__Admin__V1__SetPoolBudgetCheckResponse *resp;
	enum { PBC_POOL_ID, PBC_BUDGET_CHECK, PBC_TENANT_ID }; /* the RETURNING's columns */
	struct iam_write w = {
		.sql = "UPDATE pools SET budget_check = $2 WHERE id = $1 AND deleted_at IS NULL "
		       "RETURNING id, budget_check, NULL::text",
		.conflict_reason = "", .ev_type = "pool.budget-check-set", .subject_kind = "pool",
		.ev = {.budget_check = q->budget_check},
		.tenant_col = PBC_TENANT_ID};
	PGresult *r = NULL;
	char msg[128];
	int rc;

	if ((rc = check_id(err, "poolId", "pool", q->pool_id)) < 0)
		return rc;
	if (strcmp(q->budget_check, "none") && strcmp(q->budget_check, "meter"))
		return invalid(err, "budgetCheck", "budgetCheck must be none or meter");
	snprintf(msg, sizeof(msg), "pool %s not found", q->pool_id);
	w.notfound_msg = msg;
	dbp_str(&w.p, q->pool_id);
	dbp_str(&w.p, q->budget_check);
	if ((rc = iam_write_run(c, &w, &r, err)) < 0)
		return rc;
	resp = rpc_new(c, &bc__admin__v1__set_pool_budget_check_response__descriptor);
	resp->pool_id = row_str(c, r, 0, PBC_POOL_ID);
	resp->budget_check = row_str(c, r, 0, PBC_BUDGET_CHECK);
	PQclear(r);
	*ret = &resp->base;
	log_info("pool %s: budget check %s", q->pool_id, q->budget_check);
	return 0;
}

const struct rpc_handler *offers_handlers(size_t *ret_n)
{
	static const struct rpc_handler h[] = {
		{"Set", RPC_UNARY, {.unary = offer_set}},
		{"Get", RPC_UNARY, {.unary = offer_get}},
		{"SetPoolBudgetCheck", RPC_UNARY, {.unary = offer_pool_check}},
	};

	*ret_n = ARRAY_SIZE(h);
	return h;
}
