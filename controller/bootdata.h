/* bootdata.h: an instance's user data as its guest reads it: a MIME
 * multipart whose first part is the platform's own cloud-config (hostname,
 * the instance's SSH keys, and the sandbox SSH CA when one is given) and
 * whose second part is the caller's user data, typed by its first line.
 * Rendering is pure; bootdata_seal stores the result in the sealed store
 * (sealed.h). See docs/operations.md, "Boot data". */
#ifndef BC_CTL_BOOTDATA_H
#define BC_CTL_BOOTDATA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "db.h"
#include "err.h"
#include "guest_ready.h"
#include "sealed.h"

#define BOOTDATA_USER_MAX (64 * 1024)   /* the caller's user data, bytes */
#define BOOTDATA_KEYS_MAX 16            /* SSH keys of an instance */

/* The sandbox SSH CA part (the spec's "How the guest trusts it"): the
 * guest creates account, trusts ca_public_key for user certificates and
 * accepts the principal "<account>@<instance id>". With certifyHostKey,
 * host_key (a PEM private key) goes to BOOTDATA_HOST_KEY_PATH (0600) and
 * host_cert (its OpenSSH host certificate line) beside it, and sshd
 * presents them (HostKey, HostCertificate in the drop-in): the user data
 * then holds a private key, which is why it is only ever sealed. */
struct bootdata_ssh_ca {
	const char *account;        /* a POSIX user name, e.g. "sandbox" */
	const char *ca_public_key;  /* one OpenSSH public key line */
	const char *host_key;       /* NULL: the guest keeps its own host keys */
	const char *host_cert;      /* with host_key: its certificate line */
};

#define BOOTDATA_HOST_KEY_PATH "/etc/ssh/bc_sandbox_host_key"
#define BOOTDATA_HOST_CERT_PATH BOOTDATA_HOST_KEY_PATH "-cert.pub"
#define BOOTDATA_DROP_IN_PATH "/etc/ssh/sshd_config.d/10-bc-sandbox.conf"

/* One /etc/sandbox/env assignment: a shell variable name and the value's
 * bytes (any but NUL; not NUL-terminated necessarily). */
struct bootdata_env {
	const char *name;
	const char *value;
	size_t len;
};

#define BOOTDATA_ENV_MAX 64             /* assignments in /etc/sandbox/env */
#define BOOTDATA_ENV_NAME_MAX 128       /* bytes of one variable name */
#define BOOTDATA_ENV_PATH "/etc/sandbox/env"

/* A volume the instance attaches (docs/volumes.md, "Attach"): the guest
 * sees it as /dev/disk/by-id/virtio-<serial>. A writable one is formatted
 * ext4 at boot only when blkid finds nothing on it (exit 2: never on a
 * probe error), mounted defaults,nofail and grown (resize2fs) at the
 * instance's first boot; a read-only one is mounted ro,noload and never
 * written. serial: [A-Za-z0-9-]; mount_path: bootdata_mount_path_ok. */
struct bootdata_volume {
	const char *serial;
	const char *mount_path;
	bool read_only;
};
#define BOOTDATA_VOLUMES_MAX 8
#define BOOTDATA_MOUNT_PATH_MAX 128

struct bootdata_in {
	const char *instance_id;
	const char *const *ssh_keys;   /* OpenSSH public key lines */
	size_t n_ssh_keys;
	const char *user_data;         /* the caller's part; NULL or "" for none */
	const struct bootdata_ssh_ca *ssh_ca;   /* NULL: no sandbox CA */
	const struct bootdata_env *env;  /* written to BOOTDATA_ENV_PATH */
	size_t n_env;                    /* 0: no such file */
	/* The guest-up signal and the clock fix (docs/sandboxes.md, "How bcd
	 * knows the guest is up"): two systemd services the guest enables
	 * from runcmd. BOOTDATA_READY_UNIT, once per boot after cloud-init's
	 * final stage, POSTs /bc/ready/<instance id> to BC_GUEST_READY_PORT
	 * of its IPv4 default gateway (the pool's, which bcd serves) until
	 * bcd answers; BOOTDATA_CLOCK_UNIT steps the guest's clock to the
	 * RTC (which follows the host's, paused or not) when they differ by
	 * 2 s or more, as after a resume. Needs an instance id of
	 * [A-Za-z0-9_-] only (it goes into a script). */
	bool ready_signal;
	/* The pool's IPv4 gateway (dotted quad), where bcd listens: the
	 * signal goes there. NULL or "": the guest's IPv4 default gateway
	 * (from /proc/net/route), for a pool without IPAM. */
	const char *ready_gateway;
	const struct bootdata_volume *volumes;   /* at most BOOTDATA_VOLUMES_MAX */
	size_t n_volumes;
	/* Workload identity (docs/identity.md), root-only files: the
	 * single-use bootstrap value the guest's identity client attests with
	 * (BOOTDATA_BOOTSTRAP_PATH), or, without identity, the sandbox's 24 h
	 * API token (BOOTDATA_TOKEN_PATH). NULL or "": no such file. */
	const char *identity_bootstrap, *sandbox_token;
	/* A warm instance of a template with identity: no value yet (it comes
	 * through the host at claim), BOOTDATA_IDENTITY_HOST_PATH tells the
	 * identity client to wait for it. With this or identity_bootstrap and
	 * a ready_gateway, BOOTDATA_IDENTITY_ENDPOINT_PATH holds
	 * "GATEWAY:BC_IDENTITY_PORT", and runcmd starts BOOTDATA_IDENTITY_UNIT
	 * (the image's, contrib/guest/). */
	bool identity_host;
};

#define BOOTDATA_BOOTSTRAP_PATH "/etc/sandbox/identity/bootstrap"
#define BOOTDATA_TOKEN_PATH "/etc/sandbox/token"
#define BOOTDATA_IDENTITY_ENDPOINT_PATH BC_IDENTITY_ENDPOINT_FILE
#define BOOTDATA_IDENTITY_HOST_PATH BC_IDENTITY_HOST_FILE
#define BOOTDATA_IDENTITY_UNIT "bc-identity.service"

/* The identity rebind's guest side (bootdata_rebind.c; docs/agent.md,
 * "Identity rebind"), written with the sandbox SSH CA part: the udev rule
 * starts the oneshot service for a hot-added disk with serial bc-rebind,
 * whose script installs the bundle and acknowledges it. */
#define BOOTDATA_REBIND_RULE_PATH "/etc/udev/rules.d/90-bc-rebind.rules"
#define BOOTDATA_REBIND_SERVICE_PATH "/etc/systemd/system/bc-rebind@.service"
#define BOOTDATA_REBIND_SCRIPT_PATH "/usr/local/sbin/bc-rebind"
extern const char bootdata_rebind_rule[];
extern const char bootdata_rebind_service[];
extern const char bootdata_rebind_script[];

#define BOOTDATA_READY_UNIT "bc-guest-ready.service"
#define BOOTDATA_CLOCK_UNIT "bc-rtc-clock.service"

/* A shell variable name: [A-Za-z_][A-Za-z0-9_]*, at most
 * BOOTDATA_ENV_NAME_MAX bytes. */
bool bootdata_env_name_ok(const char *name);

/* The text of /etc/sandbox/env: a comment line, then one NAME='value'
 * line per entry, each value single-quoted with every ' written '\'' so
 * that `. file` gives the variable exactly the value's bytes back. *ret
 * malloc'd (NUL-terminated), *ret_len its length. -EINVAL for a bad name
 * or a value holding a NUL byte (no shell variable can). */
int bootdata_env_render(const struct bootdata_env *env, size_t n, char **ret, size_t *ret_len);

/* A mount path the cloud-config can carry as it is: absolute, at most
 * BOOTDATA_MOUNT_PATH_MAX bytes of [A-Za-z0-9._-] segments, none empty,
 * "." or "..", no trailing '/'. The template's rules on top (system paths,
 * nesting) are volume_attach.c's. */
bool bootdata_mount_path_ok(const char *path);

/* Check the caller's user data before anything is written: at most
 * BOOTDATA_USER_MAX bytes of UTF-8 whose first line names a type cloud-init
 * knows (#cloud-config, #!, #include, ...). INVALID_INPUT with details
 * field "userData" and reason (user-data-too-large, user-data-not-utf8,
 * user-data-type) otherwise. "" is accepted (no second part). */
int bootdata_check_user(const char *user_data, bc_error *err);

/* The MIME type of user data by its first line, or NULL if unknown. */
const char *bootdata_user_type(const char *user_data);

/* The platform's cloud-config part alone (starts "#cloud-config\n"); *ret
 * malloc'd. -EINVAL when an input cannot be rendered (not UTF-8, a bad
 * account name). */
int bootdata_cloud_config(const struct bootdata_in *in, char **ret);

/* The whole user data: a MIME multipart/mixed of the platform's part and,
 * when there is one, the caller's part. Parts that are not plain ASCII are
 * base64-encoded; the boundary is derived from the contents and never
 * occurs in them. *ret malloc'd (NUL-terminated), *ret_len its length.
 * INVALID_INPUT as bootdata_check_user, or for SSH keys that are not UTF-8. */
int bootdata_render(const struct bootdata_in *in, char **ret, size_t *ret_len, bc_error *err);

/* Render and seal for instance in->instance_id of tenant_id, inside the
 * caller's transaction; ret_ref names the sealed blob, which is recorded
 * as a platform-minted secret of tenant_id (kind sealed-user-data). */
int bootdata_seal(struct db *d, const struct bootdata_in *in, const char *tenant_id,
		  char ret_ref[SEALED_REF_MAX], bc_error *err);

/* certifyHostKey: a fresh P-256 host key for instance_id (PEM "EC PRIVATE
 * KEY", as sshd reads it, in *ret_key: free with sshcert_free_secret) and
 * its host certificate signed by ca (principal instance_id, SSHCERT_HOST_SECS
 * from now, *ret_cert malloc'd, its end in *ret_valid_before, epoch s).
 * 0, -EINVAL (an id no certificate can name) or -ENOMEM. */
struct sshcert_ca;
int bootdata_host_key_new(const struct sshcert_ca *ca, const char *instance_id, int64_t now,
			  char **ret_key, char **ret_cert, int64_t *ret_valid_before);

#endif
