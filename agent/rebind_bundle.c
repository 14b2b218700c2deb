/* rebind_bundle.c: the identity bundle's reader and the guest's archive
 * (see rebind_bundle.h). The bundle is the controller's JSON, read with
 * json_lex by a reader that knows its one shape (an object of scalars,
 * principals text, and an array of NIC objects) and refuses anything else,
 * so a hostile or broken answer never reaches the runtime or the guest. */
#include "rebind_bundle.h"

#include <arpa/inet.h>
#include <errno.h>
#include <openssl/crypto.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json_lex.h"
#include "sshcert.h"
#include "util.h"

struct cur {
	const char *p;
	char *why;
};

static int fail(struct cur *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int fail(struct cur *c, const char *fmt, ...)
{
	va_list ap;

	if (!*c->why) {
		va_start(ap, fmt);
		vsnprintf(c->why, RB_WHY_MAX, fmt, ap);
		va_end(ap);
	}
	return -EINVAL;
}

static void ws(struct cur *c)
{
	while (json_lex_ws(*c->p))
		c->p++;
}

/* Expect byte ch (after whitespace). */
static bool eat(struct cur *c, char ch)
{
	ws(c);
	if (*c->p != ch)
		return false;
	c->p++;
	return true;
}

/* A string of at most max bytes: *ret malloc'd. */
static int str(struct cur *c, size_t max, char **ret)
{
	struct json_lex_fault f;
	size_t len, used;
	char *s = NULL;

	ws(c);
	if (*c->p != '"')
		return fail(c, "a string expected");
	if (json_lex_string(c->p + 1, strlen(c->p + 1), JSON_LEX_NO_NUL | JSON_LEX_UTF8, &s, &len,
			    &used, &f) < 0)
		return fail(c, "a malformed string");
	c->p += 1 + used;
	if (len > max) {
		OPENSSL_cleanse(s, len);
		free(s);
		return fail(c, "a string longer than %zu bytes", max);
	}
	*ret = s;
	return 0;
}

/* A string copied into out (size n, so at most n - 1 bytes). */
static int str_into(struct cur *c, char *out, size_t n)
{
	_cleanup_free_ char *s = NULL;
	int r;

	if ((r = str(c, n - 1, &s)) < 0)
		return r;
	memcpy(out, s, strlen(s) + 1);
	return 0;
}

/* A non-negative integer of at most 3 digits, no leading zero. */
static int num(struct cur *c, uint32_t *ret)
{
	size_t n;

	ws(c);
	n = strspn(c->p, "0123456789");
	if (n == 0 || n > 3 || (n > 1 && *c->p == '0'))
		return fail(c, "a small integer expected");
	*ret = (uint32_t)strtoul(c->p, NULL, 10);
	c->p += n;
	return 0;
}

/* Walk an object: fn for each member (the key given), duplicates refused
 * through seen (one bit per index keys[] gives). */
typedef int (*member_fn)(struct cur *c, int key, void *arg);

static int object(struct cur *c, const char *const *keys, member_fn fn, void *arg)
{
	unsigned seen = 0;

	if (!eat(c, '{'))
		return fail(c, "an object expected");
	if (eat(c, '}'))
		return 0;
	do {
		_cleanup_free_ char *k = NULL;
		int i, r;

		if ((r = str(c, 64, &k)) < 0)
			return r;
		for (i = 0; keys[i] && strcmp(keys[i], k) != 0; i++)
			;
		if (!keys[i])
			return fail(c, "unknown key \"%.32s\"", k);
		if (seen & (1u << i))
			return fail(c, "key \"%s\" repeated", keys[i]);
		seen |= 1u << i;
		if (!eat(c, ':'))
			return fail(c, "':' expected");
		if ((r = fn(c, i, arg)) < 0)
			return r;
	} while (eat(c, ','));
	return eat(c, '}') ? 0 : fail(c, "'}' expected");
}

static bool addr_ok(int af, const char *a)
{
	unsigned char buf[16];

	return inet_pton(af, a, buf) == 1;
}

static bool mac_ok(const char *m)
{
	if (strlen(m) != 17)
		return false;
	for (int i = 0; i < 17; i++)
		if (i % 3 == 2 ? m[i] != ':' : !strchr("0123456789abcdef", m[i]))
			return false;
	return true;
}

/* ----------------------------------------------------------- the NICs */

static const char *const nic_keys[] = {"mac", "ipv4", "ipv4Prefix", "gateway4", "ipv6",
				       "ipv6Prefix", "dns", NULL};
enum { NK_MAC, NK_IPV4, NK_IPV4_PREFIX, NK_GATEWAY4, NK_IPV6, NK_IPV6_PREFIX, NK_DNS };

static int dns_list(struct cur *c, struct rb_nic *n)
{
	int r;

	if (!eat(c, '['))
		return fail(c, "dns: an array expected");
	if (eat(c, ']'))
		return 0;
	do {
		if (n->n_dns == RB_DNS_MAX)
			return fail(c, "dns: at most %d resolvers", RB_DNS_MAX);
		if ((r = str_into(c, n->dns[n->n_dns], sizeof(n->dns[0]))) < 0)
			return r;
		if (!addr_ok(AF_INET, n->dns[n->n_dns]) && !addr_ok(AF_INET6, n->dns[n->n_dns]))
			return fail(c, "dns: not an address");
		n->n_dns++;
	} while (eat(c, ','));
	return eat(c, ']') ? 0 : fail(c, "dns: ']' expected");
}

static int nic_member(struct cur *c, int key, void *arg)
{
	struct rb_nic *n = arg;

	switch (key) {
	case NK_MAC:
		return str_into(c, n->mac, sizeof(n->mac));
	case NK_IPV4:
		return str_into(c, n->ipv4, sizeof(n->ipv4));
	case NK_IPV4_PREFIX:
		return num(c, &n->ipv4_prefix);
	case NK_GATEWAY4:
		return str_into(c, n->gateway4, sizeof(n->gateway4));
	case NK_IPV6:
		return str_into(c, n->ipv6, sizeof(n->ipv6));
	case NK_IPV6_PREFIX:
		return num(c, &n->ipv6_prefix);
	default:
		return dns_list(c, n);
	}
}

static int nic_check(struct cur *c, const struct rb_nic *n)
{
	if (!mac_ok(n->mac))
		return fail(c, "nics: a bad mac");
	if (*n->ipv4 ? !addr_ok(AF_INET, n->ipv4) || n->ipv4_prefix < 1 || n->ipv4_prefix > 32
		     : n->ipv4_prefix != 0)
		return fail(c, "nics: a bad ipv4 address or prefix");
	if (*n->gateway4 && (!*n->ipv4 || !addr_ok(AF_INET, n->gateway4)))
		return fail(c, "nics: a bad gateway4");
	if (*n->ipv6 ? !addr_ok(AF_INET6, n->ipv6) || n->ipv6_prefix < 1 || n->ipv6_prefix > 128
		     : n->ipv6_prefix != 0)
		return fail(c, "nics: a bad ipv6 address or prefix");
	return 0;
}

static int nics(struct cur *c, struct rb_bundle *b)
{
	int r;

	if (!eat(c, '['))
		return fail(c, "nics: an array expected");
	if (eat(c, ']'))
		return 0;
	do {
		struct rb_nic *n;
		if (b->n_nics == RB_NICS_MAX)
			return fail(c, "nics: at most %d", RB_NICS_MAX);
		n = &b->nics[b->n_nics++];
		if ((r = object(c, nic_keys, nic_member, n)) < 0 || (r = nic_check(c, n)) < 0)
			return r;
		for (size_t i = 0; i + 1 < b->n_nics; i++)
			if (strcmp(b->nics[i].mac, n->mac) == 0)
				return fail(c, "nics: a mac repeated");
	} while (eat(c, ','));
	return eat(c, ']') ? 0 : fail(c, "nics: ']' expected");
}

/* ------------------------------------------------------------- the top */

static const char *const top_keys[] = {"v", "account", "principals", "hostKey",
				       "hostCertificate", "nics", NULL};
enum { TK_V, TK_ACCOUNT, TK_PRINCIPALS, TK_HOST_KEY, TK_HOST_CERT, TK_NICS };

struct top {
	struct rb_bundle *b;
	uint32_t v;
	bool has_v;
};

static int top_member(struct cur *c, int key, void *arg)
{
	struct top *t = arg;

	switch (key) {
	case TK_V:
		t->has_v = true;
		return num(c, &t->v);
	case TK_ACCOUNT:
		return str_into(c, t->b->account, sizeof(t->b->account));
	case TK_PRINCIPALS:
		return str(c, 4096, &t->b->principals);
	case TK_HOST_KEY:
		return str(c, RB_KEY_MAX, &t->b->host_key);
	case TK_HOST_CERT:
		return str(c, RB_CERT_MAX, &t->b->host_cert);
	default:
		return nics(c, t->b);
	}
}

/* Every line "<account>@<name>\n", one of them for instance_id. */
static int principals_check(struct cur *c, const struct rb_bundle *b, const char *instance_id)
{
	const char *p = b->principals;
	size_t alen = strlen(b->account), lines = 0;
	bool own = false;

	if (!p || !*p)
		return fail(c, "no principals");
	while (*p) {
		const char *nl = strchr(p, '\n');
		size_t n = nl ? (size_t)(nl - p) : strlen(p);
		if (!nl)
			return fail(c, "principals: the last line has no newline");
		if (++lines > RB_PRINCIPALS_MAX)
			return fail(c, "principals: at most %d lines", RB_PRINCIPALS_MAX);
		if (n <= alen + 1 || strncmp(p, b->account, alen) != 0 || p[alen] != '@' ||
		    strspn(p + alen + 1, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
					 "0123456789._-") != n - alen - 1)
			return fail(c, "principals: a line is not <account>@<name>");
		own |= n - alen - 1 == strlen(instance_id) &&
		       strncmp(p + alen + 1, instance_id, n - alen - 1) == 0;
		p = nl + 1;
	}
	return own ? 0 : fail(c, "principals: none names this instance");
}

static bool printable_lines(const char *s)
{
	for (; *s; s++)
		if ((*s < ' ' || *s > '~') && *s != '\n')
			return false;
	return true;
}

/* A PEM private key and one OpenSSH certificate line (a trailing newline
 * dropped), or neither. */
static int host_key_check(struct cur *c, struct rb_bundle *b)
{
	const char *k = b->host_key, *t = b->host_cert, *sp;
	size_t n;

	if (!k && !t)
		return 0;
	if (!k || !t)
		return fail(c, "a host key comes with its certificate, or neither does");
	n = strlen(k);
	if (n && k[n - 1] == '\n')
		n--;
	if (n < 64 || strncmp(k, "-----BEGIN ", 11) != 0 || !strstr(k, " PRIVATE KEY-----\n") ||
	    !strstr(k, "\n-----END ") || !printable_lines(k) ||
	    strncmp(k + n - 16, "PRIVATE KEY-----", 16) != 0)
		return fail(c, "hostKey is not a PEM private key");
	n = strlen(t);  /* one line; its newline, if any, is the archive's to add */
	if (n && t[n - 1] == '\n')
		b->host_cert[--n] = '\0';
	sp = strchr(t, ' ');
	if (!sp || sp - t < 22 || strncmp(sp - 21, "-cert-v01@openssh.com", 21) != 0 ||
	    strchr(t, '\n') || !printable_lines(t) || strlen(sp + 1) < 16)
		return fail(c, "hostCertificate is not an OpenSSH certificate line");
	return 0;
}

int rb_bundle_parse(const char *json, size_t len, const char *instance_id, struct rb_bundle *ret,
		    char *why)
{
	_cleanup_free_ char *text = NULL;
	struct rb_bundle b = {0};
	struct top t = {.b = &b};
	struct cur c = {.why = why};
	int r;

	why[0] = '\0';
	if (len == 0 || len > RB_BUNDLE_MAX || memchr(json, '\0', len))
		return fail(&c, "not a bundle (empty, NUL bytes, or over %d bytes)", RB_BUNDLE_MAX);
	text = xmalloc(len + 1);
	memcpy(text, json, len);
	text[len] = '\0';
	c.p = text;
	r = object(&c, top_keys, top_member, &t);
	if (r == 0) {
		ws(&c);
		if (*c.p)
			r = fail(&c, "bytes after the object");
	}
	if (r == 0 && (!t.has_v || t.v != 1))
		r = fail(&c, "not version 1");
	if (r == 0 && !sshcert_account_valid(b.account))
		r = fail(&c, "a bad account name");
	if (r == 0)
		r = principals_check(&c, &b, instance_id);
	if (r == 0)
		r = host_key_check(&c, &b);
	OPENSSL_cleanse(text, len);
	if (r < 0) {
		rb_bundle_clear(&b);
		return r;
	}
	*ret = b;
	return 0;
}

void rb_bundle_clear(struct rb_bundle *b)
{
	if (!b)
		return;
	if (b->host_key) {
		OPENSSL_cleanse(b->host_key, strlen(b->host_key));
		free(b->host_key);
	}
	free(b->principals);
	free(b->host_cert);
	memset(b, 0, sizeof(*b));
}

char *rb_network_text(const struct rb_bundle *b)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	if (!f)
		abort();
	for (size_t i = 0; i < b->n_nics; i++) {
		const struct rb_nic *n = &b->nics[i];
		fprintf(f, "mac %s\n", n->mac);
		if (*n->ipv4)
			fprintf(f, "ipv4 %s/%u\n", n->ipv4, n->ipv4_prefix);
		if (*n->gateway4)
			fprintf(f, "gateway4 %s\n", n->gateway4);
		if (*n->ipv6)
			fprintf(f, "ipv6 %s/%u\n", n->ipv6, n->ipv6_prefix);
		for (size_t k = 0; k < n->n_dns; k++)
			fprintf(f, "nameserver %s\n", n->dns[k]);
	}
	if (fclose(f) != 0)
		abort();
	return buf;
}

/* ------------------------------------------------------------ the tar */

#define TAR_BLOCK 512

/* One ustar member: header and data, padded to a block, at *pos. */
static void tar_member(unsigned char *out, size_t *pos, const char *name, const char *data)
{
	unsigned char *h = out + *pos;
	size_t n = strlen(data);
	unsigned sum = 0;
	char num[24];

	memset(h, 0, TAR_BLOCK);
	memcpy(h, name, strlen(name));                 /* name[100] */
	memcpy(h + 100, "0000600", 8);                 /* mode */
	memcpy(h + 108, "0000000", 8);                 /* uid */
	memcpy(h + 116, "0000000", 8);                 /* gid */
	snprintf(num, sizeof(num), "%011o", (unsigned)(n & 07777777777u));
	memcpy(h + 124, num, 12);                      /* size, 11 digits and a NUL */
	memcpy(h + 136, "00000000000", 12);            /* mtime */
	memset(h + 148, ' ', 8);                       /* chksum, counted as spaces */
	h[156] = '0';                                  /* a regular file */
	memcpy(h + 257, "ustar", 6);                   /* magic, NUL-terminated */
	memcpy(h + 263, "00", 2);                      /* version */
	memcpy(h + 265, "root", 4);                    /* uname */
	memcpy(h + 297, "root", 4);                    /* gname */
	for (int i = 0; i < TAR_BLOCK; i++)
		sum += h[i];
	snprintf(num, sizeof(num), "%06o", sum & 0777777u);
	memcpy(h + 148, num, 7);                       /* six digits, NUL, then the space */
	h[155] = ' ';
	*pos += TAR_BLOCK;
	memcpy(out + *pos, data, n);
	*pos += (n + TAR_BLOCK - 1) / TAR_BLOCK * TAR_BLOCK;
}

int rb_tar(const struct rb_bundle *b, const char *nonce, void **ret, size_t *ret_len)
{
	_cleanup_free_ char *nonce_line = NULL, *account = NULL, *network = NULL;
	const char *names[6], *data[6];
	unsigned char *out;
	size_t n = 0, total = 2 * TAR_BLOCK, pos = 0;

	if (strlen(nonce) != RB_NONCE_LEN || strspn(nonce, "0123456789abcdef") != RB_NONCE_LEN)
		return -EINVAL;
	nonce_line = xasprintf("%s\n", nonce);
	account = xasprintf("%s\n", b->account);
	network = rb_network_text(b);
	names[n] = "nonce", data[n++] = nonce_line;
	names[n] = "account", data[n++] = account;
	names[n] = "principals", data[n++] = b->principals;
	names[n] = "network", data[n++] = network;
	if (b->host_key) {
		names[n] = "host_key", data[n++] = b->host_key;
		names[n] = "host_key-cert.pub", data[n++] = NULL;
	}
	{
		_cleanup_free_ char *cert = b->host_cert ? xasprintf("%s\n", b->host_cert) : NULL;
		if (cert)
			data[n - 1] = cert;
		for (size_t i = 0; i < n; i++)
			total += TAR_BLOCK + (strlen(data[i]) + TAR_BLOCK - 1) / TAR_BLOCK * TAR_BLOCK;
		if (total > RB_DISK_BYTES - RB_ACK_BYTES)
			return -E2BIG;
		out = xcalloc(1, total);
		for (size_t i = 0; i < n; i++)
			tar_member(out, &pos, names[i], data[i]);
	}
	*ret = out;
	*ret_len = total;
	return 0;
}

bool rb_ack_ok(const char *area, size_t n, const char *nonce)
{
	size_t k = strlen(RB_ACK_PREFIX);

	return nonce && strlen(nonce) == RB_NONCE_LEN && n >= k + RB_NONCE_LEN + 1 &&
	       memcmp(area, RB_ACK_PREFIX, k) == 0 && memcmp(area + k, nonce, RB_NONCE_LEN) == 0 &&
	       area[k + RB_NONCE_LEN] == '\n';
}
