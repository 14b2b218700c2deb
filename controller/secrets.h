/* secrets.h: the secret broker (secrets.c): the Secrets service (Put,
 * List, Delete; values write-only, kept only in the sealed store), the
 * checks a sandbox template's secret references pass when it is written,
 * and their resolution when an instance is made from it. */
#ifndef BC_CTL_SECRETS_H
#define BC_CTL_SECRETS_H

#include <stdbool.h>
#include <stddef.h>

#include "app.h"
#include "bootdata.h"
#include "db.h"
#include "err.h"
#include "rpc.h"

#define SECRET_VALUE_MAX (64 * 1024)   /* bytes of one value */
#define SECRET_NAME_MAX 63             /* a name: str_is_slug */
#define SECRET_URI "secret://"         /* secret://<tenant>/<secret id or name> */
#define SECRET_ACTION "compute:secrets:manage"

/* The handlers of the Secrets service (server.c's table). */
const struct rpc_handler *secrets_handlers(size_t *ret_n);

/* Whether a secret broker is configured: the config key secret_broker
 * (docs/secrets.md, "Without a broker"). */
bool secrets_broker(const struct ctl_app *app);

/* A template's env entry as written: a variable name and its reference. */
struct secrets_env {
	const char *name, *ref;
};

/* Whether s is a secret:// reference (the form user data takes to name
 * a secret). */
bool secrets_is_ref(const char *s);

/* The syntax of a template's env (at most BOOTDATA_ENV_MAX entries, names
 * bootdata_env_name_ok, each value secret://<tenant>/<sec_ id or name>)
 * and of user data that is a reference: INVALID_INPUT with field
 * env.<NAME> or userData otherwise. No database. */
int secrets_check_syntax(const struct secrets_env *env, size_t n, const char *user_data,
			 bc_error *err);

/* Before a template naming secrets is written (create, or an update that
 * changes what the guest runs, on the resulting template's references):
 * the broker configured (INVALID_CONFIG), the caller's own credential
 * (ACCESS_DENIED reason credential-required: no identity, or an agent
 * acting under a delegation), compute:secrets:manage on the tenant and,
 * in the root tenant, on compute-fleet/global. n == 0 and no reference in
 * user_data: nothing is decided. */
int secrets_decide_template(rpc_call *c, const char *tenant, size_t n, const char *user_data,
			    bc_error *err);

/* Inside the template write's transaction: every reference names a
 * secret tenant wrote itself (kind user, scope tenant) that exists:
 * INVALID_INPUT (field env.<NAME> or userData; reason secret-not-found,
 * secret-other-tenant, secret-fleet, secret-platform-minted) otherwise. */
int secrets_check_refs(struct db *d, const char *tenant, const struct secrets_env *env,
		       size_t n, const char *user_data, bc_error *err);

/* A template's env (the sandbox_templates.env jsonb text) and user data
 * resolved for one instance. */
struct secrets_resolved {
	struct bootdata_env *env;   /* n_env entries, values malloc'd */
	size_t n_env;
	char *user_data;            /* the secret behind a secret:// user data, or NULL */
	char *versions;             /* {"sec_...": version} JSON, or NULL: none named */
};

/* Resolve, inside the caller's transaction, the secrets named by a
 * template of tenant (env_json: its env column; user_data: its user data)
 * for an instance being made: the versions are read together with the
 * values' refs, so what is recorded is what was given (a rotation that
 * races reads as stale). A template naming nothing costs no query.
 * INVALID_CONFIG without a broker (broker: secrets_broker's answer); INVALID_STATE (reason tenant-inactive)
 * for a suspended or deleted tenant; INVALID_INPUT as secrets_check_refs
 * (a template written before the rule) and for a secret:// user data
 * that is not user data (bootdata_check_user); INVALID_STATE reason
 * secret-not-found for a secret deleted since. secrets_resolved_free. */
int secrets_resolve(bool broker, struct db *d, const char *tenant,
		    const char *env_json, const char *user_data, struct secrets_resolved *ret,
		    bc_error *err);
/* Wipe and free what secrets_resolve filled (NULL-safe, idempotent). */
void secrets_resolved_free(struct secrets_resolved *r);

/* Record the sealed blob ref of instance_id's user data as a
 * platform-minted secret (kind sealed-user-data) of tenant, so that no
 * template can name it. In the caller's transaction. */
int secrets_record_minted(struct db *d, const char *tenant, const char *kind,
			  const char *name, const char *ref);

/* A tenant's teardown (teardown.c), in its transaction: every secret the
 * tenant wrote (both scopes) is deleted with its sealed value, each
 * publishing secret.deleted. 0 or a db_exec error. */
int secrets_tenant_deleted(struct db *d, const char *tenant);

#endif
