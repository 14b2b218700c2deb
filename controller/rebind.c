/* rebind.c: a memory restore's own identity, the controller's side
 * (docs/snapshots.md, "A restore's own SSH identity"; the host's side is
 * agent/rebind.c, the guest's docs/rebind.md).
 *
 * A memory restore resumes its source's memory: its sshd answers to the
 * source's principal with the source's host key, and its NIC still has
 * the source's MAC and address. On a deployment with the sandbox SSH CA
 * and the secret broker, the restore's create seals a bundle for it
 * (owner the instance, deleted with its sealed user data):
 *
 *   {"v": 1, "account": "sandbox", "principals": "sandbox@inst_...\n",
 *    "hostKey": "-----BEGIN EC PRIVATE KEY-----...",   (certifyHostKey)
 *    "hostCertificate": "ecdsa-sha2-nistp256-cert-v01@openssh.com ...",
 *    "nics": [{"mac": "52:54:00:..", "ipv4": "10.0.0.7", "ipv4Prefix": 24,
 *              "gateway4": "10.0.0.1", "ipv6": "", "ipv6Prefix": 0,
 *              "dns": []}]}
 *
 * instances.identity_rebind_ref names it and the NodeSpec carries the
 * ref; bcd fetches it bound to the instance and hands it to the guest.
 * When the host reports InstanceStatus.identity_rebound_ref equal to it
 * (node_report.c), identity_rebound_at is set and the row's host
 * certificate becomes the bundle's: exec then signs for the restore
 * itself (rebind_exec_identity). */
#include <errno.h>
#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "app.h"
#include "bootdata.h"
#include "db.h"
#include "ipam.h"
#include "jsonw.h"
#include "log.h"
#include "rebind.h"
#include "secrets.h"
#include "sandboxes.h"
#include "sshcert.h"
#include "util.h"

/* What the bundle says of the instance's network, read in the create's
 * transaction after its NIC was leased. */
enum { NET_MAC, NET_IPV4, NET_PREFIX, NET_GATEWAY, NET_SUBNET6 };

static int read_net(struct db *d, const char *instance_id, PGresult **ret)
{
	struct dbp p = {0};

	dbp_str(&p, instance_id);
	return db_exec(d, ret, "SELECT coalesce(i.mac::text, ''), coalesce((SELECT host(l.address) "
		       "FROM ip_leases l WHERE l.instance_id = i.id AND family(l.address) = 4 "
		       "LIMIT 1), ''), coalesce(masklen(p.ipam_subnet), 0), CASE WHEN "
		       "family(p.ipam_gateway) = 4 THEN host(p.ipam_gateway) ELSE '' END, "
		       "coalesce(p.ipam_subnet6::text, '') FROM instances i JOIN pools p ON p.id = "
		       "i.pool_id WHERE i.id = $1", &p);
}

/* The "nics" array of the bundle (one NIC today, as the NodeSpec's). */
static int nics_json(const PGresult *r, char **ret)
{
	const char *mac = db_val(r, 0, NET_MAC), *v4 = db_val(r, 0, NET_IPV4);
	const char *subnet6 = db_val(r, 0, NET_SUBNET6);
	_cleanup_free_ char *nic = NULL;
	unsigned char net[16];
	char v6[64] = "";
	struct jsonw w;
	int prefix, rc;

	if (!*mac) {
		*ret = xstrdup("[]");
		return 0;
	}
	if (*subnet6 && ipam_parse_cidr6(subnet6, net, &prefix) == 0 &&
	    ipam_eui64(net, mac, v6, sizeof(v6)) < 0)
		v6[0] = '\0';
	jsonw_begin(&w);
	jsonw_str(&w, "mac", mac);
	jsonw_str(&w, "ipv4", v4);
	jsonw_i64(&w, "ipv4Prefix", *v4 ? db_i64(r, 0, NET_PREFIX) : 0);
	jsonw_str(&w, "gateway4", *v4 ? db_val(r, 0, NET_GATEWAY) : "");
	jsonw_str(&w, "ipv6", v6);
	jsonw_i64(&w, "ipv6Prefix", *v6 ? 64 : 0);
	jsonw_raw(&w, "dns", "[]");  /* pools name no resolvers today */
	if ((rc = jsonw_end(&w, &nic)) < 0)
		return rc;
	*ret = xasprintf("[%s]", nic);
	return 0;
}

/* The bundle's JSON; *ret malloc'd (holds a private key: wipe it). */
static int bundle_json(const struct rebind_in *in, const char *key, const char *cert,
		       const char *nics, char **ret)
{
	_cleanup_free_ char *principals = xasprintf("%s@%s\n", in->account, in->instance_id);
	struct jsonw w;

	jsonw_begin(&w);
	jsonw_i64(&w, "v", 1);
	jsonw_str(&w, "account", in->account);
	jsonw_str(&w, "principals", principals);
	if (key) {
		jsonw_str(&w, "hostKey", key);
		jsonw_str(&w, "hostCertificate", cert);
	}
	jsonw_raw(&w, "nics", nics);
	return jsonw_end(&w, ret);
}

static int record(struct db *d, const struct rebind_in *in, const char *ref, int64_t valid_before)
{
	char name[96];
	struct dbp p = {0};
	int rc;

	snprintf(name, sizeof(name), "identity-rebind.%s", in->instance_id);
	if ((rc = secrets_record_minted(d, in->tenant_id, "sealed-user-data", name, ref)) < 0)
		return rc;
	dbp_str(&p, in->instance_id);
	dbp_str(&p, ref);
	if (valid_before)
		dbp_i64(&p, valid_before);
	else
		dbp_nstr(&p, NULL);
	return db_exec(d, NULL, "UPDATE instances SET identity_rebind_ref = $2, "
		       "rebind_cert_valid_before = to_timestamp($3::bigint), identity_rebound_at = "
		       "NULL WHERE id = $1", &p);
}

int rebind_seal(struct db *d, const struct rebind_in *in, bc_error *err)
{
	_cleanup_free_ char *nics = NULL, *cert = NULL;
	char *key = NULL, *json = NULL, ref[SEALED_REF_MAX];
	struct sealed_owner o = {.kind = "instance", .id = in->instance_id,
				 .tenant_id = in->tenant_id};
	PGresult *r = NULL;
	int64_t valid_before = 0;
	int rc;

	if ((rc = read_net(d, in->instance_id, &r)) < 0)
		return db_fail(err, rc);
	if (PQntuples(r) != 1) {
		PQclear(r);
		return bc_error_set(err, BC_INTERNAL, "instance %s not found", in->instance_id);
	}
	rc = nics_json(r, &nics);
	PQclear(r);
	if (rc == 0 && in->host_ca)
		rc = bootdata_host_key_new(in->host_ca, in->instance_id, (int64_t)time(NULL), &key,
					   &cert, &valid_before);
	if (rc == 0)
		rc = bundle_json(in, key, cert, nics, &json);
	sshcert_free_secret(key);
	if (rc < 0)
		return bc_error_set(err, BC_INTERNAL, "instance %s: no identity bundle: %s",
				    in->instance_id, strerror(-rc));
	rc = sealed_put(d, &o, json, strlen(json), ref);
	OPENSSL_cleanse(json, strlen(json));
	free(json);
	if (rc == 0)
		rc = record(d, in, ref, valid_before);
	if (rc < 0)
		return db_fail(err, rc);
	log_info("instance %s: identity rebind bundle %s sealed%s", in->instance_id, ref,
		 in->host_ca ? " (with a host certificate)" : "");
	return 0;
}

int rebind_reseal(struct db *d, const struct ctl_app *app, const char *instance_id,
		  bc_error *err)
{
	enum { RS_REF, RS_TENANT };
	struct dbp p = {0};
	PGresult *r = NULL;
	int rc;

	dbp_str(&p, instance_id);
	rc = db_exec(d, &r, "UPDATE instances i SET identity_rebind_ref = NULL, "
		     "rebind_cert_valid_before = NULL, identity_rebound_at = NULL FROM (SELECT id, "
		     "identity_rebind_ref AS r FROM instances WHERE id = $1 AND identity_rebind_ref IS "
		     "NOT NULL FOR UPDATE) o WHERE i.id = o.id RETURNING o.r, i.tenant_id", &p);
	if (rc < 0)
		return db_fail(err, rc);
	if (PQntuples(r) != 1) {
		PQclear(r);
		return 0;
	}
	/* the old bundle and its secret_refs row (ON DELETE CASCADE) */
	if ((rc = sealed_delete(d, db_val(r, 0, RS_REF))) < 0) {
		PQclear(r);
		return db_fail(err, rc);
	}
	rc = 0;
	if (app && app->sandbox_ca && secrets_broker(app))
		rc = rebind_seal(d, &(struct rebind_in){.instance_id = instance_id,
				 .tenant_id = db_val(r, 0, RS_TENANT),
				 .account = app->cfg.sandbox_account,
				 .host_ca = sbx_certify_host_key(app) ? app->sandbox_ca : NULL}, err);
	PQclear(r);
	return rc;
}

/* Whose identity the instance answers to and its host certificate: a
 * memory restore not rebound answers with its lineage's principal, and
 * presents that instance's host certificate (its memory holds it). */
#define EXEC_IDENTITY_SQL                                                                     \
	"WITH a AS (SELECT CASE WHEN i.identity_rebound_at IS NULL THEN coalesce((SELECT "       \
	"s.principal_instance_id FROM sandbox_snapshots s WHERE s.id = i.restore_snapshot_id "   \
	"AND s.include_memory), i.id) ELSE i.id END AS p FROM instances i WHERE i.id = $1) "    \
	"SELECT a.p, coalesce(o.host_certified, false), coalesce(floor(extract(epoch FROM "      \
	"o.host_cert_valid_before) * 1000)::bigint, 0) FROM a LEFT JOIN instances o ON o.id = a.p"
enum { EI_PRINCIPAL, EI_CERTIFIED, EI_VALID_BEFORE_MS };

int rebind_exec_identity(struct db *d, const char *instance_id, struct rebind_identity *ret,
			 bc_error *err)
{
	struct dbp p = {0};
	PGresult *r = NULL;
	int rc;

	dbp_str(&p, instance_id);
	if ((rc = db_one(d, &r, EXEC_IDENTITY_SQL, &p, err, "instance %s not found",
			 instance_id)) < 0)
		return rc;
	snprintf(ret->principal_instance, sizeof(ret->principal_instance), "%s",
		 db_val(r, 0, EI_PRINCIPAL));
	ret->host_certified = db_bool(r, 0, EI_CERTIFIED);
	ret->host_cert_valid_before = db_i64(r, 0, EI_VALID_BEFORE_MS);
	PQclear(r);
	return 0;
}
