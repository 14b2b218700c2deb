/* snapstore_cmd.c: `bc-controller snapshot-store VERB`, the operator's
 * commands for the snapshot store (snapstore.h, docs/snapshots.md):
 *
 *   set-secret             read the secret access key from stdin, seal it
 *   check                  config, secret, and a probe object's signed
 *                          HEAD bucket, PUT, GET, DELETE round trip
 *   presign put|get KEY    print a presigned URL (--ttl SECONDS, 300)
 *   delete KEY             delete an object (404 counts as deleted)
 *
 * The secret is never an argument (argv is readable by every user through
 * /proc) and never printed; URLs are printed only by presign, to stdout. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>

#include "app.h"
#include "kek.h"
#include "log.h"
#include "sealed.h"
#include "sigv4.h"
#include "snapstore.h"
#include "util.h"

#define TTL_DEFAULT 300

struct cmd_args {
	int argc;
	char **argv;        /* the verb's positional arguments */
	int ttl;
};

/* -------------------------------------------------------------- set-secret */

struct put_secret {
	const char *value;
	size_t len;
	int64_t version;
};

static int put_secret_tx(struct db *d, void *arg, bc_error *err)
{
	enum { EX_ID, EX_REF };
	struct put_secret *a = arg;
	_cleanup_free_ char *old = NULL, *version = NULL;
	char id[64], ref[SEALED_REF_MAX];
	struct sealed_owner o = {.kind = "secret", .id = id, .tenant_id = AUTH_ROOT_TENANT};
	struct dbp p = {0};
	PGresult *r = NULL;
	int rc;

	dbp_str(&p, AUTH_ROOT_TENANT);
	dbp_str(&p, SNAPSTORE_SECRET_KIND);
	dbp_str(&p, SNAPSTORE_SECRET_NAME);
	if ((rc = db_exec(d, NULL, "SELECT pg_advisory_xact_lock(hashtextextended($1 || '/' || $2 "
			  "|| '/' || $3, 16))", &p)) < 0 ||
	    (rc = db_exec(d, &r, "SELECT id, sealed_ref FROM secret_refs WHERE tenant_id = $1 AND "
			  "kind = $2 AND name = $3 FOR UPDATE", &p)) < 0)
		return db_fail(err, rc);
	if (PQntuples(r) == 1) {
		snprintf(id, sizeof(id), "%s", db_val(r, 0, EX_ID));
		old = xstrdup(db_val(r, 0, EX_REF));
	} else {
		id_new("sec", id, sizeof(id));
	}
	PQclear(r);
	if ((rc = sealed_put(d, &o, a->value, a->len, ref)) < 0)
		return db_fail(err, rc);
	dbp_str(&p, id);
	dbp_str(&p, ref);
	rc = db_scalar(d, old ? "UPDATE secret_refs SET version = version + 1, sealed_ref = $5, "
			  "updated_at = now() WHERE id = $4 AND tenant_id = $1 AND kind = $2 AND "
			  "name = $3 RETURNING version" :
			  "INSERT INTO secret_refs (id, tenant_id, kind, name, sealed_ref, "
			  "created_by) VALUES ($4, $1, $2, $3, $5, 'operator') RETURNING version",
		       &p, &version);
	if (rc >= 0 && old)
		rc = sealed_delete(d, old);
	if (rc < 0)
		return db_fail(err, rc);
	a->version = strtoll(version, NULL, 10);
	return 0;
}

/* The secret from stdin: one line (a final newline is not part of it),
 * 1 to SNAPSTORE_SECRET_MAX bytes, no control character. */
static int read_secret_stdin(char buf[SNAPSTORE_SECRET_MAX + 3], size_t *ret_len)
{
	size_t n = fread(buf, 1, SNAPSTORE_SECRET_MAX + 2, stdin);

	buf[n] = '\0';
	if (n && buf[n - 1] == '\n')
		buf[--n] = '\0';
	if (n && buf[n - 1] == '\r')
		buf[--n] = '\0';
	if (n == 0 || n > SNAPSTORE_SECRET_MAX || strlen(buf) != n ||
	    !str_is_printable(buf, SNAPSTORE_SECRET_MAX + 1))
		return -EINVAL;
	*ret_len = n;
	return 0;
}

static int cmd_set_secret(struct ctl_app *app, const struct cmd_args *a)
{
	char buf[SNAPSTORE_SECRET_MAX + 3];
	struct put_secret ps = {.value = buf};
	struct db *d = NULL;
	bc_error err;
	int r;

	bc_error_clear(&err);
	if (a->argc > 0) {
		fprintf(stderr, "snapshot-store set-secret: the secret is read from standard input, "
			"never from the command line\n");
		return 2;
	}
	r = read_secret_stdin(buf, &ps.len);
	if (r < 0) {
		OPENSSL_cleanse(buf, sizeof(buf));
		fprintf(stderr, "snapshot-store set-secret: standard input must hold the secret "
			"access key: one line of 1 to %d printable bytes\n", SNAPSTORE_SECRET_MAX);
		return 1;
	}
	if (!(d = kek_open_db(app, "snapshot-store set-secret")))
		r = -EIO;
	else if ((r = db_tx(d, "READ COMMITTED", put_secret_tx, &ps, &err)) < 0)
		log_error("snapshot-store set-secret: %s", err.message);
	OPENSSL_cleanse(buf, sizeof(buf));
	db_close(d);
	if (r < 0)
		return 1;
	log_info("snapshot-store: secret access key stored sealed (version %lld)",
		 (long long)ps.version);
	printf("stored the snapshot store's secret access key, sealed (version %lld)\n",
	       (long long)ps.version);
	return 0;
}

/* ------------------------------------------------------------------ check */

static void say(const char *step, bool good, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void say(const char *step, bool good, const char *fmt, ...)
{
	va_list ap;

	printf("%-8s %s", step, good ? "ok" : "FAILED");
	if (fmt && *fmt) {
		printf(": ");
		va_start(ap, fmt);
		vprintf(fmt, ap);
		va_end(ap);
	}
	printf("\n");
}

/* What an answer that is not want says, for a person. */
static const char *why(const struct snapstore_answer *a)
{
	if (a->status == 403)
		return "refused: the access key id or secret access key is wrong, or the key may "
		       "not use this bucket";
	if (a->status == 404)
		return "not found";
	if (a->status == 0)
		return "no answer";
	return "unexpected answer";
}

static bool step(struct snapstore *s, const char *name, const char *method, const char *key,
		 const void *body, size_t len, long want, struct snapstore_answer *ret)
{
	int r = snapstore_request(s, method, key, body, len, ret);

	if (r == 0 && ret->status == want) {
		say(name, true, "HTTP %ld", ret->status);
		return true;
	}
	if (r == -EIO)
		say(name, false, "the store did not answer: %s", ret->code);
	else if (r < 0)
		say(name, false, "%s", strerror(-r));
	else if (*ret->code)
		say(name, false, "HTTP %ld, %s (%s%s%s)", ret->status, why(ret), ret->code,
		    *ret->message ? ": " : "", ret->message);
	else
		say(name, false, "HTTP %ld, %s", ret->status, why(ret));
	return false;
}

static bool round_trip(struct snapstore *s, const char *key)
{
	struct snapstore_answer a = {0};
	unsigned char raw[32];
	char probe[65];
	bool good;

	random_bytes(raw, sizeof(raw));
	hex_encode(raw, sizeof(raw), probe);
	good = step(s, "head", "HEAD", NULL, NULL, 0, 200, &a);
	free(a.body);
	good = good && step(s, "put", "PUT", key, probe, 64, 200, &a);
	free(a.body);
	if (good && step(s, "get", "GET", key, NULL, 0, 200, &a)) {
		good = a.body_len == 64 && memcmp(a.body, probe, 64) == 0;
		if (!good)
			say("get", false, "the object read back is not the one written");
	} else {
		good = false;
	}
	free(a.body);
	good = step(s, "delete", "DELETE", key, NULL, 0, 204, &a) && good;
	free(a.body);
	if (good) {
		good = step(s, "gone", "GET", key, NULL, 0, 404, &a);
		free(a.body);
	}
	return good;
}

static int cmd_check(struct ctl_app *app, const struct cmd_args *a)
{
	const struct ctl_config *c = &app->cfg;
	struct snapstore *s = NULL;
	struct db *d = NULL;
	char key[64];
	bc_error err;
	bool good;

	bc_error_clear(&err);
	if (snapstore_require(c, &err) < 0) {
		say("config", false, "%s", err.message);
		return 1;
	}
	say("config", true, "%s bucket %s, region %s, %s, prefix '%s'",
	    c->snapshot_store_endpoint, c->snapshot_store_bucket, c->snapshot_store_region,
	    c->snapshot_store_path_style ? "path-style" : "virtual-hosted-style",
	    c->snapshot_store_prefix);
	if (!(d = kek_open_db(app, "snapshot-store check")))
		return 1;
	if (snapstore_open(c, d, &s, &err) < 0) {
		db_close(d);
		say("secret", false, "%s", err.message);
		return 1;
	}
	db_close(d);
	say("secret", true, "sealed, for access key id %s", c->snapshot_store_access_key_id);
	id_new("bc-check", key, sizeof(key));
	good = round_trip(s, key);
	snapstore_free(s);
	printf("%s\n", good ? "the snapshot store works" : "the snapshot store does not work");
	return good ? 0 : 1;
}

/* ------------------------------------------------------- presign, delete */

static struct snapstore *open_store(struct ctl_app *app, const char *verb)
{
	struct snapstore *s = NULL;
	struct db *d = kek_open_db(app, verb);
	bc_error err;

	bc_error_clear(&err);
	if (d && snapstore_open(&app->cfg, d, &s, &err) < 0)
		log_error("%s: %s", verb, err.message);
	db_close(d);
	return s;
}

static int cmd_presign(struct ctl_app *app, const struct cmd_args *a)
{
	const char *m = a->argc == 2 ? a->argv[0] : "";
	const char *method = strcmp(m, "put") == 0 ? "PUT" : strcmp(m, "get") == 0 ? "GET" : NULL;
	struct snapstore *s;
	char *url = NULL;
	int r;

	if (!method) {
		fprintf(stderr, "usage: bc-controller snapshot-store presign put|get KEY "
			"[--ttl SECONDS]\n");
		return 2;
	}
	if (!(s = open_store(app, "snapshot-store presign")))
		return 1;
	r = strcmp(method, "PUT") == 0 ? snapstore_presign_put(s, a->argv[1], a->ttl, &url) :
					 snapstore_presign_get(s, a->argv[1], a->ttl, &url);
	snapstore_free(s);
	if (r < 0) {
		fprintf(stderr, "snapshot-store presign: a key of 1 to 1024 printable bytes "
			"(with the prefix) without a '.' or '..' segment, and --ttl 1 to %d\n",
			SIGV4_EXPIRES_MAX);
		return 1;
	}
	printf("%s\n", url);
	free(url);
	return 0;
}

static int cmd_delete(struct ctl_app *app, const struct cmd_args *a)
{
	struct snapstore *s;
	bc_error err;
	int r;

	if (a->argc != 1) {
		fprintf(stderr, "usage: bc-controller snapshot-store delete KEY\n");
		return 2;
	}
	if (!(s = open_store(app, "snapshot-store delete")))
		return 1;
	bc_error_clear(&err);
	r = snapstore_delete(s, a->argv[0], &err);
	snapstore_free(s);
	if (r < 0) {
		log_error("snapshot-store delete: %s", r == -EINVAL ? "a malformed key" : err.message);
		return 1;
	}
	printf("deleted (or already gone)\n");
	return 0;
}

/* ---------------------------------------------------------------- verbs */

static const struct {
	const char *name;
	int (*fn)(struct ctl_app *app, const struct cmd_args *a);
	const char *usage;
} verbs[] = {
	{"set-secret", cmd_set_secret, "read the secret access key from stdin and seal it"},
	{"check", cmd_check, "check the config, the secret, and a probe object's round trip"},
	{"presign", cmd_presign, "put|get KEY [--ttl SECONDS]: print a presigned URL"},
	{"delete", cmd_delete, "KEY: delete an object (one already gone counts as deleted)"},
};

bool snapstore_command_flag(const char *arg, bool *takes_value)
{
	*takes_value = strcmp(arg, "--ttl") == 0;
	return *takes_value;
}

static int parse_args(int argc, char **argv, struct cmd_args *a)
{
	a->argv = xcalloc((size_t)argc + 1, sizeof(char *));
	a->ttl = TTL_DEFAULT;
	for (int i = 0; i < argc; i++) {
		char *end = NULL;
		if (strcmp(argv[i], "--ttl") != 0) {
			a->argv[a->argc++] = argv[i];
			continue;
		}
		if (i + 1 >= argc)
			return -EINVAL;
		a->ttl = (int)strtol(argv[++i], &end, 10);
		if (!*argv[i] || *end || a->ttl < 1 || a->ttl > SIGV4_EXPIRES_MAX)
			return -EINVAL;
	}
	return 0;
}

int snapstore_command(struct ctl_app *app, const char *verb, int argc, char **argv)
{
	struct cmd_args a = {0};
	int r = 2;

	if (parse_args(argc, argv, &a) < 0) {
		fprintf(stderr, "snapshot-store: --ttl takes 1 to %d seconds\n", SIGV4_EXPIRES_MAX);
		free(a.argv);
		return 2;
	}
	for (size_t i = 0; verb && i < ARRAY_SIZE(verbs); i++)
		if (strcmp(verb, verbs[i].name) == 0) {
			r = verbs[i].fn(app, &a);
			free(a.argv);
			sealed_keys_unload();
			return r;
		}
	free(a.argv);
	fprintf(stderr, "usage: bc-controller snapshot-store VERB [ARGS] [--config FILE]\n");
	for (size_t i = 0; i < ARRAY_SIZE(verbs); i++)
		fprintf(stderr, "  %-11s %s\n", verbs[i].name, verbs[i].usage);
	return r;
}
