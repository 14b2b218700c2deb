/* policy.c: IAM policy documents (see policy.h and docs/iam.md). A
 * statement is {sid, effect: allow|deny, actions, resources, conditions};
 * conditions map an operator to {"resource.<attr>" | "principal.<attr>":
 * value or [values]}. Every operator must hold (and for a list, one of its
 * values). An attribute the request lacks (or whose value does not read as
 * the operator's kind) fails closed: an allow's condition on it fails, so
 * an allow never grants on missing data, and a deny's holds, so a deny
 * never lets missing data through. "<Operator>IfExists" holds when the
 * attribute is missing, for either effect (e.g. an allow capping the
 * ttlSeconds of what has one); "Null" tests presence itself, so a deny
 * can be scoped to what has an attribute. Attribute names have one vocabulary: an
 * alias ("network") is read as its canonical name ("networkPolicy"), on
 * both sides. Parsing refuses anything it does not understand, naming the
 * field. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "policy.h"
#include "util.h"

enum cond_kind { K_NUM, K_STR, K_BOOL };
enum cond_op { OP_LT, OP_LE, OP_GT, OP_GE, OP_NEQ, OP_SEQ, OP_SLIKE, OP_BOOL, OP_NULL };

static const struct {
	const char *name;
	enum cond_op op;
	enum cond_kind kind;
} ops[] = {
	{"NumericLessThan", OP_LT, K_NUM},        {"NumericLessThanEquals", OP_LE, K_NUM},
	{"NumericGreaterThan", OP_GT, K_NUM},     {"NumericGreaterThanEquals", OP_GE, K_NUM},
	{"NumericEquals", OP_NEQ, K_NUM},         {"StringEquals", OP_SEQ, K_STR},
	{"StringLike", OP_SLIKE, K_STR},          {"Bool", OP_BOOL, K_BOOL},
	{"Null", OP_NULL, K_BOOL},   /* true: the attribute is missing; false: present */
};

#define IF_EXISTS "IfExists"

/* Attribute aliases: sandboxes were staged with "network", instances with
 * "networkPolicy"; both name the same thing. */
static const struct {
	const char *alias, *canonical;
} attr_aliases[] = {
	{"network", "networkPolicy"},
};

struct cond {
	enum cond_op op;
	bool if_exists;      /* <op>IfExists: holds when the attribute is missing */
	bool principal;      /* principal.* (else resource.*) */
	char *attr;          /* the name after the dot */
	char **strs;         /* K_STR */
	double *nums;        /* K_NUM */
	bool b;              /* K_BOOL (one value) */
	size_t n;
};

struct stmt {
	char *sid;
	bool deny;
	char **actions, **resources;
	size_t n_actions, n_resources;
	struct cond *conds;
	size_t n_conds;
};

struct policy {
	struct stmt *st;
	size_t n;
};

/* ------------------------------------------------------------------ parse */

struct perr {
	char *field, *msg;
	size_t len;
};

static int fail(struct perr *e, const char *field, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static int fail(struct perr *e, const char *field, const char *fmt, ...)
{
	va_list ap;

	if (e->field)
		snprintf(e->field, e->len, "%s", field);
	if (e->msg) {
		va_start(ap, fmt);
		vsnprintf(e->msg, e->len, fmt, ap);
		va_end(ap);
	}
	return -EINVAL;
}

static bool good_string(const char *s)
{
	return *s && str_is_printable(s, POLICY_MAX_STRING);
}

/* A non-empty array of non-empty strings (or one string) into *ret. */
static int strings(const struct json *j, const char *field, struct perr *e, char ***ret,
		   size_t *ret_n, size_t max)
{
	size_t n = j && j->type == JSON_STRING ? 1 : j && j->type == JSON_ARRAY ? j->n : 0;
	char **v;

	if (!j || (j->type != JSON_STRING && j->type != JSON_ARRAY))
		return fail(e, field, "%s must be a string or a list of strings", field);
	if (n == 0 || n > max)
		return fail(e, field, "%s must have 1 to %zu entries", field, max);
	for (size_t i = 0; i < n; i++) {
		const struct json *s = j->type == JSON_STRING ? j : j->kids[i];
		if (s->type != JSON_STRING || !good_string(s->str))
			return fail(e, field, "%s[%zu] must be a non-empty printable string of at "
				    "most %d characters", field, i, POLICY_MAX_STRING);
	}
	v = xcalloc(n, sizeof(*v));
	for (size_t i = 0; i < n; i++)
		v[i] = xstrdup(j->type == JSON_STRING ? j->str : j->kids[i]->str);
	*ret = v;
	*ret_n = n;
	return 0;
}

static int cond_values(const struct json *v, enum cond_kind kind, const char *field,
		       struct perr *e, struct cond *c)
{
	size_t n = v->type == JSON_ARRAY ? v->n : 1;
	static const enum json_type want[] = {JSON_NUMBER, JSON_STRING, JSON_BOOL};
	static const char *const what[] = {"a number", "a string", "true or false"};

	if (n == 0 || n > POLICY_MAX_PATTERNS || (kind == K_BOOL && v->type == JSON_ARRAY))
		return fail(e, field, "%s must be %s%s", field, what[kind],
			    kind == K_BOOL ? "" : " or a non-empty list of them");
	for (size_t i = 0; i < n; i++) {
		const struct json *x = v->type == JSON_ARRAY ? v->kids[i] : v;
		if (x->type != want[kind] || (kind == K_NUM && !isfinite(x->num)) ||
		    (kind == K_STR && !str_is_printable(x->str, POLICY_MAX_STRING)))
			return fail(e, field, "%s must be %s", field, what[kind]);
	}
	c->n = n;
	if (kind == K_BOOL)
		c->b = v->b;
	else if (kind == K_NUM)
		c->nums = xcalloc(n, sizeof(*c->nums));
	else
		c->strs = xcalloc(n, sizeof(*c->strs));
	for (size_t i = 0; i < n && kind != K_BOOL; i++) {
		const struct json *x = v->type == JSON_ARRAY ? v->kids[i] : v;
		if (kind == K_NUM)
			c->nums[i] = x->num;
		else
			c->strs[i] = xstrdup(x->str);
	}
	return 0;
}

static int cond_key(const char *key, const char *field, struct perr *e, struct cond *c)
{
	const char *dot = strchr(key, '.');

	if (!dot || !good_string(dot + 1) ||
	    (strncmp(key, "resource.", 9) != 0 && strncmp(key, "principal.", 10) != 0))
		return fail(e, field, "%s must name resource.<attribute> or principal.<attribute>",
			    field);
	c->principal = key[0] == 'p';
	c->attr = xstrdup(policy_attr_canonical(dot + 1));
	return 0;
}

const char *policy_attr_canonical(const char *name)
{
	for (size_t i = 0; i < ARRAY_SIZE(attr_aliases); i++)
		if (strcmp(attr_aliases[i].alias, name) == 0)
			return attr_aliases[i].canonical;
	return name;
}

/* The operator named key ("StringEquals", "NumericLessThanIfExists"):
 * its index in ops, or ARRAY_SIZE(ops); *ret_if_exists for the suffix. */
static size_t op_find(const char *key, bool *ret_if_exists)
{
	size_t n = strlen(key), sfx = strlen(IF_EXISTS), k;
	bool ifx = n > sfx && strcmp(key + n - sfx, IF_EXISTS) == 0;

	if (ifx)
		n -= sfx;
	for (k = 0; k < ARRAY_SIZE(ops); k++)
		if (strlen(ops[k].name) == n && strncmp(ops[k].name, key, n) == 0)
			break;
	*ret_if_exists = ifx;
	return k;
}

static int conditions(const struct json *j, const char *base, struct perr *e, struct stmt *s)
{
	char field[POLICY_MAX_STRING * 2 + 128];
	size_t total = 0, k;

	if (j->type != JSON_OBJECT)
		return fail(e, base, "%s must be an object of operators", base);
	for (size_t i = 0; i < j->n; i++)
		total += j->kids[i]->type == JSON_OBJECT ? j->kids[i]->n : 0;
	if (total > POLICY_MAX_CONDITIONS)
		return fail(e, base, "%s has more than %d conditions", base, POLICY_MAX_CONDITIONS);
	s->conds = xcalloc(total ? total : 1, sizeof(*s->conds));
	for (size_t i = 0; i < j->n; i++) {
		const struct json *o = j->kids[i];
		bool ifx;
		snprintf(field, sizeof(field), "%s.%.64s", base, j->keys[i]);
		k = op_find(j->keys[i], &ifx);
		if (k == ARRAY_SIZE(ops) || (ifx && ops[k].op == OP_NULL))
			return fail(e, field, "%s is not a known condition operator", field);
		if (o->type != JSON_OBJECT || o->n == 0)
			return fail(e, field, "%s must be a non-empty object of attribute: value", field);
		for (size_t a = 0; a < o->n; a++) {
			struct cond *c = &s->conds[s->n_conds++];
			snprintf(field, sizeof(field), "%s.%.64s.%.128s", base, j->keys[i], o->keys[a]);
			c->op = ops[k].op;
			c->if_exists = ifx;
			if (cond_key(o->keys[a], field, e, c) < 0 ||
			    cond_values(o->kids[a], ops[k].kind, field, e, c) < 0)
				return -EINVAL;
		}
	}
	return 0;
}

static int statement(const struct json *j, const char *base, struct perr *e, struct stmt *s)
{
	static const char *const known[] = {"sid", "effect", "actions", "resources", "conditions"};
	char field[160];
	const struct json *v;

	if (j->type != JSON_OBJECT)
		return fail(e, base, "%s must be an object", base);
	for (size_t i = 0; i < j->n; i++) {
		size_t k;
		for (k = 0; k < ARRAY_SIZE(known) && strcmp(known[k], j->keys[i]) != 0; k++)
			;
		snprintf(field, sizeof(field), "%s.%.64s", base, j->keys[i]);
		if (k == ARRAY_SIZE(known))
			return fail(e, field, "%s is not a statement field", field);
	}
	snprintf(field, sizeof(field), "%s.sid", base);
	v = json_get(j, "sid");
	if (v && (v->type != JSON_STRING || !str_is_printable(v->str, 128)))
		return fail(e, field, "%s must be a printable string of at most 128 characters",
			    field);
	s->sid = xstrdup(v ? v->str : "");
	snprintf(field, sizeof(field), "%s.effect", base);
	v = json_get(j, "effect");
	if (!v || v->type != JSON_STRING || (strcmp(v->str, "allow") && strcmp(v->str, "deny")))
		return fail(e, field, "%s must be allow or deny", field);
	s->deny = v->str[0] == 'd';
	snprintf(field, sizeof(field), "%s.actions", base);
	if (strings(json_get(j, "actions"), field, e, &s->actions, &s->n_actions,
		    POLICY_MAX_PATTERNS) < 0)
		return -EINVAL;
	snprintf(field, sizeof(field), "%s.resources", base);
	if (strings(json_get(j, "resources"), field, e, &s->resources, &s->n_resources,
		    POLICY_MAX_PATTERNS) < 0)
		return -EINVAL;
	snprintf(field, sizeof(field), "%s.conditions", base);
	v = json_get(j, "conditions");
	return v ? conditions(v, field, e, s) : 0;
}

static int statements(const struct json *list, const char *base, struct perr *e,
		      struct policy *p)
{
	char field[64];

	if (list->n == 0 || list->n > POLICY_MAX_STATEMENTS)
		return fail(e, base, "%s must have 1 to %d statements", base, POLICY_MAX_STATEMENTS);
	p->st = xcalloc(list->n, sizeof(*p->st));
	for (size_t i = 0; i < list->n; i++) {
		snprintf(field, sizeof(field), "%s[%zu]", base, i);
		p->n++;
		if (statement(list->kids[i], field, e, &p->st[i]) < 0)
			return -EINVAL;
	}
	return 0;
}

int policy_parse(const char *text, size_t len, struct policy **ret, char *ret_field,
		 char *ret_msg, size_t len_each)
{
	struct perr e = {.field = ret_field, .msg = ret_msg, .len = len_each};
	struct policy *p = NULL;
	struct json *j = NULL;
	const struct json *list;
	size_t at = 0;
	int r;

	if (len > POLICY_MAX_BYTES)
		return fail(&e, "document", "document is larger than %d bytes", POLICY_MAX_BYTES);
	if (json_parse(text, len, &j, &at) < 0)
		return fail(&e, "document", "document is not valid JSON (at byte %zu)", at);
	p = xcalloc(1, sizeof(*p));
	if (j->type == JSON_ARRAY) {
		r = statements(j, "statements", &e, p);
	} else if (j->type == JSON_OBJECT && json_get(j, "effect")) {
		p->st = xcalloc(1, sizeof(*p->st));
		p->n = 1;
		r = statement(j, "statement", &e, p->st);
	} else if ((list = json_get(j, "statements")) && list->type == JSON_ARRAY && j->n == 1) {
		r = statements(list, "statements", &e, p);
	} else {
		r = fail(&e, "statements", "a policy is {\"statements\": [...]}, a list of "
			 "statements or one statement");
	}
	json_free(j);
	if (r < 0) {
		policy_free(p);
		return r;
	}
	*ret = p;
	return 0;
}

static void strv_free(char **v, size_t n)
{
	for (size_t i = 0; v && i < n; i++)
		free(v[i]);
	free(v);
}

void policy_free(struct policy *p)
{
	if (!p)
		return;
	for (size_t i = 0; i < p->n; i++) {
		struct stmt *s = &p->st[i];
		free(s->sid);
		strv_free(s->actions, s->n_actions);
		strv_free(s->resources, s->n_resources);
		for (size_t c = 0; c < s->n_conds; c++) {
			free(s->conds[c].attr);
			strv_free(s->conds[c].strs, s->conds[c].strs ? s->conds[c].n : 0);
			free(s->conds[c].nums);
		}
		free(s->conds);
	}
	free(p->st);
	free(p);
}

size_t policy_statements(const struct policy *p)
{
	return p ? p->n : 0;
}

/* --------------------------------------------------------------- evaluate */

bool policy_glob(const char *pat, const char *s)
{
	const char *star = NULL, *retry = NULL;

	while (*s) {
		if (*pat == '*') {
			star = pat++;
			retry = s;
		} else if (*pat == '?' || *pat == *s) {
			pat++;
			s++;
		} else if (star) {
			pat = star + 1;
			s = ++retry;
		} else {
			return false;
		}
	}
	while (*pat == '*')
		pat++;
	return *pat == '\0';
}

static bool any_glob(char *const *pats, size_t n, const char *s)
{
	for (size_t i = 0; i < n; i++)
		if (policy_glob(pats[i], s))
			return true;
	return false;
}

static bool resource_matches(const struct stmt *s, const struct policy_request *q)
{
	if (any_glob(s->resources, s->n_resources, q->resource))
		return true;
	for (size_t i = 0; i < q->n_ancestors; i++)
		if (any_glob(s->resources, s->n_resources, q->ancestors[i]))
			return true;
	return false;
}

static const char *attr_of(const struct cond *c, const struct policy_request *q)
{
	const struct policy_attr *a = c->principal ? q->principal_attrs : q->resource_attrs;
	size_t n = c->principal ? q->n_principal_attrs : q->n_resource_attrs;

	for (size_t i = 0; i < n; i++)
		if (strcmp(policy_attr_canonical(a[i].name), c->attr) == 0)
			return a[i].value;
	return NULL;
}

static bool num_holds(enum cond_op op, double have, double want)
{
	switch (op) {
	case OP_LT: return have < want;
	case OP_LE: return have <= want;
	case OP_GT: return have > want;
	case OP_GE: return have >= want;
	default: return have == want;
	}
}

/* Whether c holds for q in a statement of effect deny (or allow): a
 * missing attribute holds for IfExists and for a deny, and so does a
 * value a numeric operator cannot read, for a deny (fail closed). */
static bool cond_holds(const struct cond *c, const struct policy_request *q, bool deny)
{
	const char *v = attr_of(c, q);
	char *end;
	double d = 0;

	if (c->op == OP_NULL)
		return (v == NULL) == c->b;
	if (!v)
		return c->if_exists || deny;
	if (c->op == OP_BOOL)
		return strcmp(v, c->b ? "true" : "false") == 0;
	if (c->nums) {
		d = strtod(v, &end);
		if (!*v || *end || !isfinite(d))
			return deny;
	}
	for (size_t i = 0; i < c->n; i++) {
		if (c->nums ? num_holds(c->op, d, c->nums[i])
			    : c->op == OP_SLIKE ? policy_glob(c->strs[i], v)
						: strcmp(c->strs[i], v) == 0)
			return true;
	}
	return false;
}

static bool stmt_matches(const struct stmt *s, const struct policy_request *q)
{
	if (!any_glob(s->actions, s->n_actions, q->action) || !resource_matches(s, q))
		return false;
	for (size_t i = 0; i < s->n_conds; i++)
		if (!cond_holds(&s->conds[i], q, s->deny))
			return false;
	return true;
}

enum policy_effect policy_decide(const struct policy *const *docs, size_t n,
				 const struct policy_request *q, const char **ret_sid)
{
	const char *allow_sid = NULL;

	for (size_t d = 0; d < n; d++) {
		if (!docs[d]) {
			if (ret_sid)
				*ret_sid = NULL;
			return POLICY_DENY_UNREADABLE;
		}
		for (size_t i = 0; i < docs[d]->n; i++) {
			const struct stmt *s = &docs[d]->st[i];
			if (!stmt_matches(s, q))
				continue;
			if (s->deny) {
				if (ret_sid)
					*ret_sid = s->sid;
				return POLICY_DENY_EXPLICIT;
			}
			if (!allow_sid)
				allow_sid = s->sid;
		}
	}
	if (ret_sid)
		*ret_sid = allow_sid;
	return allow_sid ? POLICY_ALLOW : POLICY_DENY_DEFAULT;
}
