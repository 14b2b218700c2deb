/* Unit tests of the policy engine (controller/policy.c): parsing and its
 * refusals naming the field, wildcards, the resource hierarchy, every
 * condition operator and its IfExists form, explicit deny over allow and
 * the default deny, a deny failing closed on a missing attribute, an
 * unreadable document denying, attribute aliases, and a deny in the last
 * of many documents. */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "controller/json.h"
#include "controller/policy.h"
#include "tap.h"

static struct policy *parse(const char *doc)
{
	struct policy *p = NULL;
	char field[256], msg[256];

	if (policy_parse(doc, strlen(doc), &p, field, msg, sizeof(field)) < 0)
		printf("# parse failed: %s: %s\n", field, msg);
	return p;
}

/* The field named when doc is refused, "" when it parses. */
static const char *refused(const char *doc)
{
	static char field[256];
	struct policy *p = NULL;
	char msg[256];

	field[0] = '\0';
	if (policy_parse(doc, strlen(doc), &p, field, msg, sizeof(field)) == 0) {
		policy_free(p);
		return "";
	}
	return field;
}

static const char *const anc_pool[] = {"compute-pool/pool_a", "tenant/t1"};

static enum policy_effect decide(const struct policy *p, const char *action, const char *res,
				 const struct policy_attr *ra, size_t nra)
{
	const struct policy_attr pa[] = {{"id", "idn_alice"}, {"kind", "user"}};
	struct policy_request q = {.action = action, .resource = res, .ancestors = anc_pool,
				   .n_ancestors = 2, .resource_attrs = ra, .n_resource_attrs = nra,
				   .principal_attrs = pa, .n_principal_attrs = 2};
	const struct policy *const docs[] = {p};

	return policy_decide(docs, p ? 1 : 0, &q, NULL);
}

static void test_refusals(void)
{
	is_str(refused("{"), "document", "bad JSON names document");
	is_str(refused("[]"), "statements", "empty list refused");
	is_str(refused("{\"foo\": 1}"), "statements", "no statements");
	is_str(refused("[{\"effect\": \"maybe\", \"actions\": \"*\", \"resources\": \"*\"}]"),
	       "statements[0].effect", "bad effect named");
	is_str(refused("[{\"effect\": \"allow\", \"resources\": \"*\"}]"), "statements[0].actions",
	       "missing actions named");
	is_str(refused("[{\"effect\": \"allow\", \"actions\": [], \"resources\": \"*\"}]"),
	       "statements[0].actions", "empty actions named");
	is_str(refused("[{\"effect\": \"allow\", \"actions\": \"*\", \"resources\": [1]}]"),
	       "statements[0].resources", "non-string resource named");
	is_str(refused("[{\"effect\": \"allow\", \"actions\": \"*\", \"resources\": \"*\"},"
		       "{\"effect\": \"allow\", \"actions\": \"*\", \"resources\": \"*\", \"x\": 1}]"),
	       "statements[1].x", "unknown statement field named");
	is_str(refused("[{\"effect\": \"allow\", \"actions\": \"*\", \"resources\": \"*\", "
		       "\"conditions\": {\"NumericSmaller\": {\"resource.a\": 1}}}]"),
	       "statements[0].conditions.NumericSmaller", "unknown operator named");
	is_str(refused("[{\"effect\": \"allow\", \"actions\": \"*\", \"resources\": \"*\", "
		       "\"conditions\": {\"NumericLessThan\": {\"resource.a\": \"x\"}}}]"),
	       "statements[0].conditions.NumericLessThan.resource.a", "string for a number named");
	is_str(refused("[{\"effect\": \"allow\", \"actions\": \"*\", \"resources\": \"*\", "
		       "\"conditions\": {\"StringEquals\": {\"owner\": \"x\"}}}]"),
	       "statements[0].conditions.StringEquals.owner", "key without resource./principal.");
	is_str(refused("[{\"effect\": \"allow\", \"actions\": \"*\", \"resources\": \"*\", "
		       "\"conditions\": {\"Bool\": {\"resource.gpu\": [true]}}}]"),
	       "statements[0].conditions.Bool.resource.gpu", "Bool takes one value");
	is_str(refused("{\"effect\": \"allow\", \"actions\": \"*\", \"resources\": \"*\"}"), "",
	       "one bare statement accepted");
	is_str(refused("{\"statements\": [{\"effect\": \"deny\", \"actions\": [\"a\"], "
		       "\"resources\": [\"b\"]}]}"), "", "statements object accepted");
	is_str(refused("[{\"effect\": \"allow\", \"actions\": \"a\\u0000b\", \"resources\": \"*\"}]"),
	       "document", "NUL in a string refused");
}

static bool json_ok(const char *text)
{
	struct json *j = NULL;
	int r = json_parse(text, strlen(text), &j, NULL);

	json_free(j);
	return r == 0;
}

static void test_json(void)
{
	const char *mixed = "{\"a\": [1, -2.5e1, true, null, \"x\\u00e9\\ud83d\\ude00\"]}";
	struct json *j = NULL;
	char deep[64];

	ok(json_parse(mixed, strlen(mixed), &j, NULL) == 0, "a mixed document parses");
	ok(j && json_get(j, "a") && json_get(j, "a")->n == 5, "five items");
	if (j && json_get(j, "a") && json_get(j, "a")->n == 5) {
		is_int((long long)json_get(j, "a")->kids[1]->num, -25, "-2.5e1 is -25");
		is_str(json_get(j, "a")->kids[4]->str, "x\xc3\xa9\xf0\x9f\x98\x80",
		       "\\u escapes and a surrogate pair become UTF-8");
	}
	json_free(j);
	ok(!json_ok("{\"a\": 1,}"), "trailing comma refused");
	ok(!json_ok("[1] x"), "trailing garbage refused");
	ok(!json_ok("\"\\ud83d\""), "a lone surrogate refused");
	ok(!json_ok("\"a\tb\""), "a raw control character refused");
	ok(!json_ok("nul"), "a cut keyword refused");
	memset(deep, '[', 20);
	memset(deep + 20, ']', 20);
	deep[40] = '\0';
	ok(!json_ok(deep), "nesting past %d refused", JSON_MAX_DEPTH);
	memset(deep, '[', JSON_MAX_DEPTH);
	memset(deep + JSON_MAX_DEPTH, ']', JSON_MAX_DEPTH);
	deep[2 * JSON_MAX_DEPTH] = '\0';
	ok(json_ok(deep), "nesting of %d accepted", JSON_MAX_DEPTH);
}

static void test_glob(void)
{
	ok(policy_glob("*", ""), "* matches empty");
	ok(policy_glob("compute:*", "compute:instances:create"), "prefix wildcard");
	ok(policy_glob("compute:*:read", "compute:instances:read"), "middle wildcard");
	ok(!policy_glob("compute:*:read", "compute:instances:delete"), "middle wildcard mismatch");
	ok(policy_glob("a?c", "abc") && !policy_glob("a?c", "ac"), "? is one character");
	ok(!policy_glob("compute-instance/*", "compute-pool/pool_a"), "type is matched");
	ok(policy_glob("*a*a*a*a*b", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaab"), "backtracking");
}

static void test_decide(void)
{
	struct policy *p;
	const struct policy_attr small[] = {{"vcpus", "2"}, {"gpus", "0"}, {"ttlSeconds", "600"}};
	const struct policy_attr big[] = {{"vcpus", "2"}, {"gpus", "0"}, {"ttlSeconds", "7200"}};
	const struct policy_attr gpu[] = {{"vcpus", "2"}, {"gpus", "1"}, {"ttlSeconds", "60"}};
	const char *res = "compute-instance/inst_1";

	p = parse("[{\"effect\": \"allow\", \"actions\": \"compute:instances:read\", "
		  "\"resources\": \"compute-instance/*\"}]");
	is_int(decide(p, "compute:instances:read", res, NULL, 0), POLICY_ALLOW, "plain allow");
	is_int(decide(p, "compute:instances:delete", res, NULL, 0), POLICY_DENY_DEFAULT,
	       "other action: default deny");
	policy_free(p);

	p = parse("[{\"effect\": \"allow\", \"actions\": \"compute:*\", \"resources\": \"*\"},"
		  "{\"sid\": \"NoDelete\", \"effect\": \"deny\", \"actions\": "
		  "\"compute:instances:delete\", \"resources\": \"compute-instance/*\"}]");
	is_int(decide(p, "compute:instances:read", res, NULL, 0), POLICY_ALLOW, "wildcard allow");
	is_int(decide(p, "compute:instances:delete", res, NULL, 0), POLICY_DENY_EXPLICIT,
	       "explicit deny wins over allow");
	policy_free(p);

	p = parse("[{\"effect\": \"allow\", \"actions\": \"*\", \"resources\": "
		  "\"compute-pool/pool_a\"}]");
	is_int(decide(p, "compute:instances:create", res, NULL, 0), POLICY_ALLOW,
	       "pool grant reaches an instance in the pool");
	policy_free(p);
	p = parse("[{\"effect\": \"allow\", \"actions\": \"*\", \"resources\": "
		  "\"compute-pool/pool_b\"}]");
	is_int(decide(p, "compute:instances:create", res, NULL, 0), POLICY_DENY_DEFAULT,
	       "another pool's grant does not");
	policy_free(p);
	p = parse("[{\"effect\": \"allow\", \"actions\": \"*\", \"resources\": \"tenant/t1\"}]");
	is_int(decide(p, "compute:instances:delete", res, NULL, 0), POLICY_ALLOW,
	       "tenant grant reaches everything in it");
	policy_free(p);

	p = parse("{\"sid\": \"ShortCpuSandboxes\", \"effect\": \"allow\", \"actions\": "
		  "[\"compute:instances:create\"], \"resources\": [\"compute-instance/*\"], "
		  "\"conditions\": {\"NumericLessThanEquals\": {\"resource.ttlSeconds\": 3600, "
		  "\"resource.gpus\": 0}}}");
	is_int(decide(p, "compute:instances:create", res, small, 3), POLICY_ALLOW,
	       "ShortCpu: short CPU-only allowed");
	is_int(decide(p, "compute:instances:create", res, big, 3), POLICY_DENY_DEFAULT,
	       "ShortCpu: ttl above 3600 refused");
	is_int(decide(p, "compute:instances:create", res, gpu, 3), POLICY_DENY_DEFAULT,
	       "ShortCpu: a GPU refused");
	is_int(decide(p, "compute:instances:create", res, small, 1), POLICY_DENY_DEFAULT,
	       "ShortCpu: missing attribute refused");
	policy_free(p);

	p = parse("[{\"effect\": \"allow\", \"actions\": \"*\", \"resources\": \"*\", "
		  "\"conditions\": {\"NumericGreaterThan\": {\"resource.vcpus\": 1}, "
		  "\"NumericGreaterThanEquals\": {\"resource.vcpus\": 2}, "
		  "\"NumericLessThan\": {\"resource.vcpus\": 3}, "
		  "\"NumericEquals\": {\"resource.vcpus\": [4, 2]}, "
		  "\"StringEquals\": {\"principal.kind\": \"user\"}, "
		  "\"StringLike\": {\"principal.id\": \"idn_a*\"}}}]");
	is_int(decide(p, "x", res, small, 3), POLICY_ALLOW, "every operator holds");
	policy_free(p);
	p = parse("[{\"effect\": \"allow\", \"actions\": \"*\", \"resources\": \"*\", "
		  "\"conditions\": {\"StringLike\": {\"principal.id\": \"idn_b*\"}}}]");
	is_int(decide(p, "x", res, small, 3), POLICY_DENY_DEFAULT, "StringLike mismatch");
	policy_free(p);
	p = parse("[{\"effect\": \"allow\", \"actions\": \"*\", \"resources\": \"*\", "
		  "\"conditions\": {\"Bool\": {\"resource.gpus\": false}}}]");
	is_int(decide(p, "x", res, small, 3), POLICY_DENY_DEFAULT, "Bool on a non-bool is false");
	policy_free(p);
	p = parse("[{\"effect\": \"deny\", \"actions\": \"*\", \"resources\": \"*\", "
		  "\"conditions\": {\"NumericGreaterThan\": {\"resource.spend\": 10}}}]");
	is_int(decide(p, "x", res, small, 3), POLICY_DENY_EXPLICIT,
	       "conditional deny fires on a missing attribute (fails closed)");
	policy_free(p);
	is_int(decide(NULL, "x", res, NULL, 0), POLICY_DENY_DEFAULT, "no policy: default deny");
}

static void test_fail_closed(void)
{
	const struct policy_attr inst[] = {{"vcpus", "2"}, {"networkPolicy", "egress"}};
	const struct policy_attr sbx[] = {{"vcpus", "2"}, {"network", "egress"},
					  {"ttlSeconds", "7200"}};
	const struct policy_attr bad[] = {{"ttlSeconds", "soon"}};
	const char *res = "compute-instance/inst_1";
	struct policy *p;

	p = parse("{\"effect\": \"allow\", \"actions\": \"*\", \"resources\": \"*\", "
		  "\"conditions\": {\"NumericLessThanEqualsIfExists\": {\"resource.ttlSeconds\": 3600}}}");
	is_int(decide(p, "x", res, inst, 2), POLICY_ALLOW, "IfExists: missing attribute holds");
	is_int(decide(p, "x", res, sbx, 3), POLICY_DENY_DEFAULT, "IfExists: present, compared");
	is_int(decide(p, "x", res, bad, 1), POLICY_DENY_DEFAULT,
	       "IfExists: an unreadable number does not grant");
	policy_free(p);
	p = parse("{\"effect\": \"allow\", \"actions\": \"*\", \"resources\": \"*\", "
		  "\"conditions\": {\"NumericLessThanEquals\": {\"resource.ttlSeconds\": 3600}}}");
	is_int(decide(p, "x", res, inst, 2), POLICY_DENY_DEFAULT,
	       "without IfExists an allow never grants on a missing attribute");
	policy_free(p);
	p = parse("{\"effect\": \"deny\", \"actions\": \"*\", \"resources\": \"*\", "
		  "\"conditions\": {\"NumericGreaterThan\": {\"resource.ttlSeconds\": 3600}}}");
	is_int(decide(p, "x", res, bad, 1), POLICY_DENY_EXPLICIT,
	       "a deny fires on a value its operator cannot read");
	is_int(decide(p, "x", res, inst, 2), POLICY_DENY_EXPLICIT, "and on a missing one");
	policy_free(p);
	is_str(refused("{\"effect\": \"allow\", \"actions\": \"*\", \"resources\": \"*\", "
		       "\"conditions\": {\"BoolIfExists\": {\"resource.gpu\": [true]}}}"),
	       "statement.conditions.BoolIfExists.resource.gpu", "IfExists checks values as its base");
	is_str(refused("{\"effect\": \"allow\", \"actions\": \"*\", \"resources\": \"*\", "
		       "\"conditions\": {\"IfExists\": {\"resource.gpu\": true}}}"),
	       "statement.conditions.IfExists", "IfExists alone is no operator");

	p = parse("{\"effect\": \"deny\", \"actions\": \"*\", \"resources\": \"*\", "
		  "\"conditions\": {\"StringEquals\": {\"resource.networkPolicy\": \"egress\"}}}");
	is_int(decide(p, "x", res, sbx, 3), POLICY_DENY_EXPLICIT,
	       "networkPolicy reads a resource staged with the alias network");
	policy_free(p);
	p = parse("{\"effect\": \"deny\", \"actions\": \"*\", \"resources\": \"*\", "
		  "\"conditions\": {\"StringEquals\": {\"resource.network\": \"egress\"}}}");
	is_int(decide(p, "x", res, inst, 2), POLICY_DENY_EXPLICIT,
	       "the alias network reads networkPolicy");
	policy_free(p);
	p = parse("{\"effect\": \"deny\", \"actions\": \"*\", \"resources\": \"*\", "
		  "\"conditions\": {\"Null\": {\"resource.ttlSeconds\": false}}}");
	is_int(decide(p, "x", res, sbx, 3), POLICY_DENY_EXPLICIT, "Null false: present, the deny fires");
	is_int(decide(p, "x", res, inst, 2), POLICY_DENY_DEFAULT, "Null false: missing, it does not");
	policy_free(p);
	is_str(refused("{\"effect\": \"allow\", \"actions\": \"*\", \"resources\": \"*\", "
		       "\"conditions\": {\"NullIfExists\": {\"resource.gpu\": true}}}"),
	       "statement.conditions.NullIfExists", "Null has no IfExists form");
	is_str(policy_attr_canonical("network"), "networkPolicy", "network is an alias");
	is_str(policy_attr_canonical("vcpus"), "vcpus", "vcpus is its own name");
}

static void test_many_docs(void)
{
	enum { N = 600 };
	struct policy *v[N];
	struct policy_request q = {.action = "compute:instances:create",
				   .resource = "compute-instance/inst_1"};
	const char *sid = NULL;

	for (size_t i = 0; i + 1 < N; i++)
		v[i] = parse("{\"effect\": \"allow\", \"actions\": \"*\", \"resources\": \"*\"}");
	v[N - 1] = parse("{\"sid\": \"Last\", \"effect\": \"deny\", \"actions\": \"*\", "
			 "\"resources\": \"*\"}");
	is_int(policy_decide((const struct policy *const *)v, N, &q, &sid), POLICY_DENY_EXPLICIT,
	       "a deny in the 600th document holds");
	is_str(sid ? sid : "", "Last", "and is named");
	policy_free(v[N - 1]);
	v[N - 1] = NULL;
	is_int(policy_decide((const struct policy *const *)v, N, &q, &sid), POLICY_DENY_UNREADABLE,
	       "an unreadable document among allows denies");
	for (size_t i = 0; i + 1 < N; i++)
		policy_free(v[i]);
}

int main(void)
{
	test_json();
	test_refusals();
	test_glob();
	test_decide();
	test_fail_closed();
	test_many_docs();
	done_testing();
}
