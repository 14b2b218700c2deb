/* sshclient.c: see sshclient.h. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sshcert.h"
#include "sshclient.h"
#include "util.h"

/* Every option that could hand the guest something, off. */
static const char *const fixed[] = {
	"-o", "IdentitiesOnly=yes",
	"-o", "ForwardAgent=no",
	"-o", "ForwardX11=no",
	"-o", "ClearAllForwardings=yes",
	"-o", "ProxyCommand=none",
	"-o", "ProxyJump=none",
	"-o", "ControlMaster=no",
	"-o", "ControlPath=none",
	"-o", "PermitLocalCommand=no",
	"-o", "UpdateHostKeys=no",
	"-o", "CanonicalizeHostname=no",
	"-o", "PasswordAuthentication=no",
	"-o", "KbdInteractiveAuthentication=no",
	"-o", "GSSAPIAuthentication=no",
	"-o", "HostbasedAuthentication=no",
};

static bool name_ok(const char *s, size_t max)
{
	size_t n = s ? strlen(s) : 0;

	if (n == 0 || n > max)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
		      (s[i] >= '0' && s[i] <= '9') || strchr("._@-", s[i])))
			return false;
	return true;
}

/* A file name ssh reads from an -o line: no newline, no '"' (the value is
 * quoted), printable. */
static bool file_ok(const char *s)
{
	if (!s || !*s || strlen(s) > 4096)
		return false;
	for (const unsigned char *p = (const unsigned char *)s; *p; p++)
		if (*p < 0x20 || *p == 0x7f || *p == '"')
			return false;
	return true;
}

struct vec {
	char **v;
	size_t n, cap;
};

static void push(struct vec *v, const char *s)
{
	if (v->n + 1 >= v->cap) {
		v->cap = v->cap ? v->cap * 2 : 64;
		v->v = realloc(v->v, v->cap * sizeof(*v->v));
		if (!v->v)
			abort();
	}
	v->v[v->n++] = xstrdup(s);
	v->v[v->n] = NULL;
}

/* -o NAME=VALUE, VALUE in double quotes when quote. */
static void push_opt(struct vec *v, const char *name, const char *val, bool quote)
{
	char *s = xasprintf(quote ? "%s=\"%s\"" : "%s=%s", name, val);

	push(v, "-o");
	push(v, s);
	free(s);
}

static int check(const struct sshc_opts *o, char *const *args, size_t n_args)
{
	if (!o->prog || !*o->prog || o->port < 1 || o->port > 65535 || !file_ok(o->key_file) ||
	    !file_ok(o->cert_file) || !file_ok(o->known_hosts) || !name_ok(o->account, 64) ||
	    !name_ok(o->host_key_alias, 128) || n_args > SSHC_ARGS_MAX ||
	    (o->kind == SSHC_SCP && n_args < 2))
		return -EINVAL;
	for (size_t i = 0; i < n_args; i++)
		if (!args[i] || (o->kind == SSHC_SCP && strchr(args[i], '\n')))
			return -EINVAL;
	return 0;
}

int sshc_argv(const struct sshc_opts *o, char *const *args, size_t n_args, char ***ret)
{
	struct vec v = {0};
	char port[16];
	int r;

	if ((r = check(o, args, n_args)) < 0)
		return r;
	snprintf(port, sizeof(port), "%d", o->port);
	push(&v, o->prog);
	push(&v, "-F");
	push(&v, "none");
	push(&v, o->kind == SSHC_SCP ? "-P" : "-p");
	push(&v, port);
	push(&v, "-i");
	push(&v, o->key_file);
	if (o->kind == SSHC_SSH) {
		push(&v, "-a");
		push(&v, "-x");
	} else if (o->recursive) {
		push(&v, "-r");
	}
	for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++)
		push(&v, fixed[i]);
	push_opt(&v, "CertificateFile", o->cert_file, true);
	push_opt(&v, "UserKnownHostsFile", o->known_hosts, true);
	push_opt(&v, "GlobalKnownHostsFile", o->known_hosts, true);
	push_opt(&v, "HostKeyAlias", o->host_key_alias, false);
	push_opt(&v, "StrictHostKeyChecking", o->strict ? "yes" : "accept-new", false);
	push_opt(&v, "User", o->account, false);
	push(&v, "--");
	if (o->kind == SSHC_SSH)
		push(&v, SSHC_HOST);
	for (size_t i = 0; i < n_args; i++)
		push(&v, args[i]);
	*ret = v.v;
	return 0;
}

void sshc_argv_free(char **argv)
{
	if (!argv)
		return;
	for (char **p = argv; *p; p++)
		free(*p);
	free(argv);
}

static bool principal_ok(const char *s)
{
	size_t n = s ? strlen(s) : 0;

	if (n == 0 || n > 128)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') ||
		      strchr("_.-", s[i])))
			return false;
	return true;
}

int sshc_known_hosts(bool certified, const char *host_principal, const char *ca_line,
		     char **ret)
{
	struct sshcert_pubkey k;
	const char *sp;
	size_t type_len, b64_len;

	if (!certified) {
		*ret = xstrdup("");
		return 0;
	}
	if (!principal_ok(host_principal) || !ca_line ||
	    sshcert_ca_line_check(ca_line, NULL) < 0 || sshcert_pubkey_parse(ca_line, &k, NULL) < 0)
		return -EINVAL;
	sp = strchr(ca_line, ' ');
	type_len = (size_t)(sp - ca_line);
	b64_len = strcspn(sp + 1, " ");
	*ret = xasprintf("@cert-authority %s %.*s %.*s\n", host_principal, (int)type_len, ca_line,
			 (int)b64_len, sp + 1);
	return 0;
}

bool sshc_remote_path(const char *s, char *id, size_t id_len, const char **ret_path)
{
	const char *colon = strchr(s, ':');
	size_t n;

	if (!colon || strncmp(s, "sbx_", 4) != 0)
		return false;
	n = (size_t)(colon - s);
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '_'))
			return false;
	if (n >= id_len)
		return false;
	memcpy(id, s, n);
	id[n] = '\0';
	*ret_path = colon + 1;
	return true;
}
