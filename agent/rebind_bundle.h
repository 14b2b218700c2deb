/* rebind_bundle.h: a memory restore's identity bundle as bcd reads it, and
 * the archive its guest reads (rebind_bundle.c; docs/agent.md, "Identity
 * rebind"). Pure: no I/O, no logging; fuzzed (tests/fuzz/
 * fuzz_rebind_bundle.c). */
#ifndef BC_AGENT_REBIND_BUNDLE_H
#define BC_AGENT_REBIND_BUNDLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define RB_BUNDLE_MAX (64 * 1024)     /* the sealed JSON, bytes */
#define RB_PRINCIPALS_MAX 16          /* lines of the principals file */
#define RB_KEY_MAX (8 * 1024)         /* the PEM host key, bytes */
#define RB_CERT_MAX (8 * 1024)        /* the certificate line, bytes */
#define RB_NICS_MAX 4
#define RB_DNS_MAX 4
#define RB_NONCE_LEN 32               /* hex digits */
#define RB_DISK_BYTES (1024 * 1024)   /* the disk the runtime hot-adds */
#define RB_ACK_BYTES 4096             /* its last 4 KiB: the guest's acknowledgement */
#define RB_WHY_MAX 128

struct rb_nic {
	char mac[18];                 /* lower-case aa:bb:cc:dd:ee:ff */
	char ipv4[16];                /* "" none */
	uint32_t ipv4_prefix;         /* 1..32 with ipv4, else 0 */
	char gateway4[16];            /* "" none */
	char ipv6[46];                /* "" none */
	uint32_t ipv6_prefix;         /* 1..128 with ipv6, else 0 */
	char dns[RB_DNS_MAX][46];
	size_t n_dns;
};

/* A checked bundle; rb_bundle_clear wipes and frees it. */
struct rb_bundle {
	char account[33];
	char *principals;             /* 1..RB_PRINCIPALS_MAX lines, each ending '\n' */
	char *host_key;               /* PEM private key, or NULL */
	char *host_cert;              /* its OpenSSH certificate line (no newline), or NULL */
	struct rb_nic nics[RB_NICS_MAX];
	size_t n_nics;
};

/* Parse and check len bytes of bundle JSON (docs/agent.md, "Identity
 * rebind"): {"v": 1, "account", "principals", "hostKey"?,
 * "hostCertificate"?, "nics"?}. Every principal line is "<account>@<name>"
 * of [A-Za-z0-9._-], and one of them must be "<account>@<instance_id>"; a
 * host key comes with its certificate or neither does; unknown or repeated
 * keys are refused. 0 with *ret filled (clear it), or -EINVAL with why
 * (RB_WHY_MAX bytes) saying what is wrong; *ret is then empty. */
int rb_bundle_parse(const char *json, size_t len, const char *instance_id, struct rb_bundle *ret,
		    char *why);

/* Wipe the host key and free what ret holds; NULL-safe; ret is zeroed. */
void rb_bundle_clear(struct rb_bundle *b);

/* The text of the archive's "network" file: per NIC a "mac M" line, then
 * "ipv4 A/P", "gateway4 G", "ipv6 A/P" and "nameserver N" lines for what
 * it has. *ret malloc'd. */
char *rb_network_text(const struct rb_bundle *b);

/* The archive the guest's bc-rebind reads (ustar, regular files of mode
 * 0600, owner 0, mtime 0, two zero blocks at its end): nonce (its
 * RB_NONCE_LEN hex digits and a newline), account, principals, network,
 * and host_key with host_key-cert.pub when there is a host key. *ret
 * malloc'd (holds the key: wipe it), *ret_len a multiple of 512. -EINVAL
 * for a nonce that is not RB_NONCE_LEN lower-case hex digits, -E2BIG when
 * it would not leave the disk's last RB_ACK_BYTES free. */
int rb_tar(const struct rb_bundle *b, const char *nonce, void **ret, size_t *ret_len);

/* The guest's acknowledgement: the n bytes at the start of the disk's last
 * RB_ACK_BYTES begin with "BCREBOUND <nonce>\n" for this nonce. */
#define RB_ACK_PREFIX "BCREBOUND "
bool rb_ack_ok(const char *area, size_t n, const char *nonce);

#endif
