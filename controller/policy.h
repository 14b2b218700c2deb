/* policy.h: IAM policy documents and decisions. Pure: parsing and
 * evaluation touch no database, so they are unit tested, fuzzed and
 * benchmarked alone. The controller loads the documents that apply to a
 * caller (controller/authz.c) and asks policy_decide. */
#ifndef BC_CTL_POLICY_H
#define BC_CTL_POLICY_H

#include <stdbool.h>
#include <stddef.h>

#define POLICY_MAX_BYTES (256 * 1024)
#define POLICY_MAX_STATEMENTS 1000
#define POLICY_MAX_PATTERNS 64     /* actions or resources of one statement */
#define POLICY_MAX_CONDITIONS 32   /* keys across a statement's operators */
#define POLICY_MAX_STRING 512

struct policy;

/* Parse and validate a document: {"statements": [...]}, a bare array of
 * statements, or one statement. 0 with *ret (owned, policy_free it), or
 * -EINVAL with ret_field (if not NULL, len bytes) naming the offending
 * field, e.g. "statements[2].conditions.NumericLessThan", and ret_msg
 * saying what is wrong with it. */
int policy_parse(const char *json, size_t len, struct policy **ret, char *ret_field,
		 char *ret_msg, size_t len_each);
void policy_free(struct policy *p);
size_t policy_statements(const struct policy *p);

/* One attribute of the resource or the principal: a name and its value as
 * text ("3600", "true", "alice"); numeric operators parse it. */
struct policy_attr {
	const char *name;
	const char *value;
};

/* What is being decided. resource is "<type>/<id>"; ancestors are its
 * parents outward ("compute-pool/pool_1", "tenant/t1"), each reached by a
 * grant as if it were the resource. */
struct policy_request {
	const char *action;
	const char *resource;
	const char *const *ancestors;
	size_t n_ancestors;
	const struct policy_attr *resource_attrs;
	size_t n_resource_attrs;
	const struct policy_attr *principal_attrs;
	size_t n_principal_attrs;
};

enum policy_effect {
	POLICY_DENY_DEFAULT, POLICY_ALLOW, POLICY_DENY_EXPLICIT, POLICY_DENY_UNREADABLE
};

/* Decide over every statement of docs[0..n): a NULL entry stands for a
 * document that cannot be read and is a deny (POLICY_DENY_UNREADABLE,
 * *ret_sid NULL); else an explicit deny that matches wins, else an allow that matches, else the default deny. *ret_sid (if
 * not NULL) is the deciding statement's sid (borrowed from the doc, "" if
 * it had none; NULL for the default deny). */
enum policy_effect policy_decide(const struct policy *const *docs, size_t n,
				 const struct policy_request *q, const char **ret_sid);

/* The canonical name of attribute name ("network" is "networkPolicy");
 * name itself when it is no alias. Stage attributes under this name. */
const char *policy_attr_canonical(const char *name);

/* Glob match with '*' (any run, also empty) and '?' (one character). */
bool policy_glob(const char *pattern, const char *s);

#endif
