/* bc-identity: the guest's workload-identity client (docs/identity.md; bcd's
 * side: agent/identity_ep.c, the wire: common/guest_ready.h).
 *
 * Built by contrib/guest/customize.sh with the host's cc (libc only) into
 * /usr/local/lib/bc/bc-identity; bc-identity.service runs it as the system
 * user bc-identity (not the sandbox's account), after cloud-init wrote the
 * boot data:
 *
 *   /etc/sandbox/identity/bootstrap  the single-use value (a cold sandbox)
 *   /etc/sandbox/identity/host       a warm instance: the value comes from
 *                                    the host at claim (long-poll GET
 *                                    /bc/identity/bootstrap)
 *   /etc/sandbox/identity/endpoint   "GATEWAY:PORT" of bcd's endpoint
 *                                    (else the default route's gateway:9470)
 *
 * Neither of the first two: the sandbox has no identity; exit 0 quietly.
 * Otherwise attest (POST /bc/identity/attest), keep the capability token in
 * /run/bc-identity/token (0600; a restart renews with it), and renew
 * (POST /bc/identity/renew) every renewAfterSeconds. Transient failures
 * (no answer, 409 in flight, 429, 5xx, CONFLICT address-live) are retried
 * with a capped exponential backoff; a refusal that cannot change (the
 * value used, expired, unknown, the sandbox deleting, the token revoked)
 * ends it with status 2 (RestartPreventExitStatus=2). No value or token is
 * ever printed.
 *
 * bc-identity state running|idle: the harness's activity (a prompt was
 * delivered; the turn is complete), reported with the kept capability
 * token (POST /bc/identity/state, body "STATE:TOKEN"); run as the
 * bc-identity user or root, the token's only readers. Transient failures
 * are retried a few times (STATE_TRIES); exit 0 when the broker took it
 * (a repeat of the same state is a no-op), 2 when refused (the token not
 * live, the sandbox not yet runtime-ready: its code and reason printed),
 * 1 without a token or an answer. BC_IDENTITY_DIR, BC_IDENTITY_RUN and BC_IDENTITY_SOURCE
 * (the address to send from) are for tests (tests/integration/
 * identity_host.t runs it against a real bcd). */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define DEFAULT_PORT 9470
#define VALUE_MAX 256
#define RESPONSE_MAX 8192
#define IO_TIMEOUT_S 40      /* above bcd's 25 s long-poll */
#define BACKOFF_MAX_S 60
#define EXIT_REFUSED 2
#define STATE_TRIES 5

static const char *conf_dir = "/etc/sandbox/identity";
static const char *run_dir = "/run/bc-identity";
/* BC_IDENTITY_SOURCE (tests on a loopback subnet: the instance's address);
 * a real guest sends from its own address anyway */
static struct sockaddr_in source;

struct endpoint {
	struct sockaddr_in sa;
	char host[32];
};

struct answer {
	int status;             /* 0: no answer */
	char body[RESPONSE_MAX];
};

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fputs("bc-identity: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
}

static void wipe(void *p, size_t n)
{
	volatile unsigned char *v = p;

	while (n--)
		*v++ = 0;
}

/* path's first line (at most max-1 bytes, trailing whitespace cut) into
 * out: 0, or -errno. */
static int read_line(const char *path, char *out, size_t max)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		return -errno;
	n = read(fd, out, max - 1);
	close(fd);
	if (n < 0)
		return -errno;
	out[n] = '\0';
	out[strcspn(out, "\r\n")] = '\0';
	while (n > 0 && (out[strlen(out) - 1] == ' ' || out[strlen(out) - 1] == '\t'))
		out[strlen(out) - 1] = '\0', n--;
	return *out ? 0 : -ENODATA;
}

static bool exists(const char *dir, const char *name)
{
	char p[512];

	snprintf(p, sizeof(p), "%s/%s", dir, name);
	return access(p, F_OK) == 0;
}

/* The IPv4 default gateway from /proc/net/route, or false. */
static bool default_gateway(struct in_addr *ret)
{
	FILE *f = fopen("/proc/net/route", "re");
	char line[256], ifn[64];
	unsigned dst, gw, flags;
	bool found = false;

	if (!f)
		return false;
	while (!found && fgets(line, sizeof(line), f))
		if (sscanf(line, "%63s %x %x %x", ifn, &dst, &gw, &flags) == 4 && dst == 0 &&
		    (flags & 0x2)) {
			ret->s_addr = gw;
			found = true;
		}
	fclose(f);
	return found;
}

/* The endpoint file, else the default gateway on DEFAULT_PORT. */
static bool find_endpoint(struct endpoint *ep)
{
	char path[512], line[64], *colon;
	long port = DEFAULT_PORT;

	memset(ep, 0, sizeof(*ep));
	ep->sa.sin_family = AF_INET;
	snprintf(path, sizeof(path), "%s/endpoint", conf_dir);
	if (read_line(path, line, sizeof(line)) == 0) {
		if ((colon = strrchr(line, ':'))) {
			*colon = '\0';
			port = strtol(colon + 1, NULL, 10);
		}
		if (inet_pton(AF_INET, line, &ep->sa.sin_addr) != 1 || port < 1 || port > 65535)
			return false;
	} else if (!default_gateway(&ep->sa.sin_addr)) {
		return false;
	}
	ep->sa.sin_port = htons((uint16_t)port);
	snprintf(ep->host, sizeof(ep->host), "%s:%ld", inet_ntoa(ep->sa.sin_addr), port);
	return true;
}

static int64_t clock_ms(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Read until the peer closes, max-1 bytes, IO_TIMEOUT_S: the length read.
 * A paused guest's clocks stand still, and bc-rtc-clock.service steps the
 * wall clock within ~2 s of a resume: a jump of the wall clock against the
 * monotonic one means the connection may be long dead (bcd answered a
 * long-poll while this guest was paused, as a warm instance before its
 * claim), so it is dropped (0) and the caller asks again at once rather
 * than waiting out the timeout. */
static size_t read_answer(int fd, char *buf, size_t max)
{
	const int64_t skew0 = clock_ms(CLOCK_REALTIME) - clock_ms(CLOCK_MONOTONIC);
	const int64_t deadline = clock_ms(CLOCK_MONOTONIC) + IO_TIMEOUT_S * 1000;
	struct pollfd p = {.fd = fd, .events = POLLIN};
	size_t len = 0;
	ssize_t k;

	while (len < max - 1 && clock_ms(CLOCK_MONOTONIC) < deadline) {
		int r = poll(&p, 1, 1000);
		int64_t skew = clock_ms(CLOCK_REALTIME) - clock_ms(CLOCK_MONOTONIC);

		if (r < 0 && errno != EINTR)
			return 0;
		if (skew - skew0 > 3000 || skew0 - skew > 3000) {
			say("the clock jumped (a resume?): asking again");
			return 0;
		}
		if (r <= 0)
			continue;
		if ((k = recv(fd, buf + len, max - 1 - len, 0)) <= 0)
			break;
		len += (size_t)k;
	}
	return len;
}

/* One HTTP/1.1 exchange; a->status 0 when there was no whole answer. */
static void http(const struct endpoint *ep, const char *method, const char *path,
		 const char *body, struct answer *a)
{
	struct timeval tv = {.tv_sec = IO_TIMEOUT_S};
	char req[VALUE_MAX + 512], *sep;
	size_t len = 0, bl = body ? strlen(body) : 0;
	int fd = -1, n;

	a->status = 0;
	a->body[0] = '\0';
	if (body)
		n = snprintf(req, sizeof(req), "%s %s HTTP/1.1\r\nHost: %s\r\nContent-Type: "
			     "text/plain\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n%s",
			     method, path, ep->host, bl, body);
	else
		n = snprintf(req, sizeof(req), "%s %s HTTP/1.1\r\nHost: %s\r\nConnection: "
			     "close\r\n\r\n", method, path, ep->host);
	if (n < 0 || (size_t)n >= sizeof(req))
		return;
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		goto out;
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	if (source.sin_family == AF_INET &&   /* tests only: the guest's address */
	    bind(fd, (const struct sockaddr *)&source, sizeof(source)) < 0)
		goto out;
	if (connect(fd, (const struct sockaddr *)&ep->sa, sizeof(ep->sa)) < 0 ||
	    send(fd, req, (size_t)n, MSG_NOSIGNAL) != n)
		goto out;
	len = read_answer(fd, a->body, sizeof(a->body));
	a->body[len] = '\0';
	if (sscanf(a->body, "HTTP/1.%*d %d", &a->status) != 1 ||
	    !(sep = strstr(a->body, "\r\n\r\n"))) {
		a->status = 0;
		a->body[0] = '\0';
	} else {
		memmove(a->body, sep + 4, strlen(sep + 4) + 1);
	}
out:
	wipe(req, sizeof(req));
	if (fd >= 0)
		close(fd);
}

/* The string or number value of "key" in a flat JSON object (no escapes
 * in the values bcd sends), into out; false when absent. */
static bool json_get(const char *json, const char *key, char *out, size_t max)
{
	char pat[64];
	const char *p;
	size_t n = 0;

	snprintf(pat, sizeof(pat), "\"%s\"", key);
	if (!(p = strstr(json, pat)))
		return false;
	p += strlen(pat);
	while (*p == ' ' || *p == ':')
		p++;
	if (*p == '"')
		for (p++; *p && *p != '"' && n + 1 < max; p++)
			out[n++] = *p;
	else
		for (; (*p == '-' || (*p >= '0' && *p <= '9')) && n + 1 < max; p++)
			out[n++] = *p;
	out[n] = '\0';
	return n > 0;
}

/* A refusal that will not change by asking again. */
static bool permanent(const struct answer *a)
{
	char reason[64] = "";

	if (a->status == 400 || a->status == 404)
		return true;
	json_get(a->body, "reason", reason, sizeof(reason));
	return (a->status == 403 && strcmp(reason, "unknown-source") != 0) ||
	       (a->status == 409 && strcmp(reason, "sandbox-deleting") == 0);
}

static unsigned backoff(unsigned *s)
{
	unsigned now = *s;

	*s = *s * 2 > BACKOFF_MAX_S ? BACKOFF_MAX_S : *s * 2;
	return now;
}

static void refused(const char *what, const struct answer *a)
{
	char code[64] = "?", reason[64] = "?";

	json_get(a->body, "code", code, sizeof(code));
	json_get(a->body, "reason", reason, sizeof(reason));
	say("%s refused: %d %s %s", what, a->status, code, reason);
}

/* The warm path: ask bcd until the claim's value arrives. */
static void bootstrap_from_host(const struct endpoint *ep, char value[VALUE_MAX])
{
	struct answer a;
	unsigned wait = 1;

	say("waiting for the host to hand over the bootstrap value (a warm instance)");
	for (;;) {
		http(ep, "GET", "/bc/identity/bootstrap", NULL, &a);
		size_t n = strcspn(a.body, "\r\n");

		if (a.status == 200 && n > 0 && n < VALUE_MAX) {
			memcpy(value, a.body, n);
			value[n] = '\0';
			wipe(&a, sizeof(a));
			return;
		}
		if (a.status == 204) {   /* the long-poll ran out: ask again */
			wait = 1;
			continue;
		}
		if (a.status)
			refused("bootstrap", &a);
		sleep(backoff(&wait));
	}
}

static int save_token(const char *token)
{
	char path[512], tmp[520];
	int fd;
	ssize_t n;

	snprintf(path, sizeof(path), "%s/token", run_dir);
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	n = write(fd, token, strlen(token));
	if (close(fd) < 0 || n != (ssize_t)strlen(token) || rename(tmp, path) < 0) {
		unlink(tmp);
		return -EIO;
	}
	return 0;
}

/* Attest with value; the token in token, the renewal period in *renew.
 * 0, or EXIT_REFUSED. */
static int attest(const struct endpoint *ep, const char *value, char token[VALUE_MAX],
		  unsigned *renew)
{
	struct answer a;
	char epoch[96] = "", sbx[96] = "", n[32] = "";
	unsigned wait = 1;

	for (;;) {
		http(ep, "POST", "/bc/identity/attest", value, &a);
		if (a.status == 200 && json_get(a.body, "capabilityToken", token, VALUE_MAX))
			break;
		if (a.status)
			refused("attestation", &a);
		else
			say("no answer from %s (retrying)", ep->host);
		if (a.status && permanent(&a))
			return EXIT_REFUSED;
		sleep(backoff(&wait));
	}
	json_get(a.body, "epochId", epoch, sizeof(epoch));
	json_get(a.body, "sandboxId", sbx, sizeof(sbx));
	*renew = json_get(a.body, "renewAfterSeconds", n, sizeof(n)) ? (unsigned)atoi(n) : 480;
	wipe(&a, sizeof(a));
	say("identity live: sandbox %s, epoch %s; renewing every %u s", sbx, epoch, *renew);
	if (save_token(token) < 0)
		say("cannot keep the capability token in %s (renewing from memory)", run_dir);
	return 0;
}

/* Renew forever; EXIT_REFUSED when the token is no longer live. */
static int renew_loop(const struct endpoint *ep, const char *token, unsigned renew)
{
	struct answer a;
	char n[32];

	for (;;) {
		unsigned wait = 5;

		sleep(renew ? renew : 480);
		for (;;) {
			http(ep, "POST", "/bc/identity/renew", token, &a);
			if (a.status == 200)
				break;
			if (a.status)
				refused("renewal", &a);
			if (a.status && permanent(&a))
				return EXIT_REFUSED;
			sleep(backoff(&wait));
		}
		renew = json_get(a.body, "renewAfterSeconds", n, sizeof(n)) ? (unsigned)atoi(n) : 480;
	}
}

/* bc-identity state STATE: report it once (with a few retries). */
static int report_state(const char *state)
{
	char token[VALUE_MAX], path[512], body[VALUE_MAX + 16], life[32] = "?";
	struct endpoint ep;
	struct answer a;
	unsigned wait = 1;
	int rc = 1;

	if (strcmp(state, "running") != 0 && strcmp(state, "idle") != 0) {
		say("usage: bc-identity state running|idle");
		return 1;
	}
	snprintf(path, sizeof(path), "%s/token", run_dir);
	if (read_line(path, token, sizeof(token)) < 0) {
		say("no capability token in %s (identity not live, or not this user's)", run_dir);
		return 1;
	}
	if (!find_endpoint(&ep)) {
		say("no endpoint (%s/endpoint, default route)", conf_dir);
		wipe(token, sizeof(token));
		return 1;
	}
	snprintf(body, sizeof(body), "%s:%s", state, token);
	wipe(token, sizeof(token));
	for (int i = 0; i < STATE_TRIES; i++) {
		http(&ep, "POST", "/bc/identity/state", body, &a);
		if (a.status == 200) {
			json_get(a.body, "lifecycle", life, sizeof(life));
			say("reported %s: the sandbox is %s", state, life);
			rc = 0;
			break;
		}
		if (a.status)
			refused("state report", &a);
		else
			say("no answer from %s", ep.host);
		if (a.status && (permanent(&a) || a.status == 409) &&
		    !strstr(a.body, "request-in-flight")) {
			rc = EXIT_REFUSED;
			break;
		}
		if (i + 1 < STATE_TRIES)
			sleep(backoff(&wait));
	}
	wipe(body, sizeof(body));
	wipe(&a, sizeof(a));
	return rc;
}

int main(int argc, char **argv)
{
	char value[VALUE_MAX] = "", token[VALUE_MAX] = "", path[512];
	struct endpoint ep;
	unsigned renew = 0;
	int rc;

	if (getenv("BC_IDENTITY_DIR"))
		conf_dir = getenv("BC_IDENTITY_DIR");
	if (getenv("BC_IDENTITY_RUN"))
		run_dir = getenv("BC_IDENTITY_RUN");
	if (getenv("BC_IDENTITY_SOURCE") &&
	    inet_pton(AF_INET, getenv("BC_IDENTITY_SOURCE"), &source.sin_addr) == 1)
		source.sin_family = AF_INET;
	if (argc == 3 && strcmp(argv[1], "state") == 0)
		return report_state(argv[2]);
	if (argc != 1) {
		say("usage: bc-identity [state running|idle]");
		return 1;
	}
	if (!exists(conf_dir, "bootstrap") && !exists(conf_dir, "host"))
		return 0;   /* no identity: nothing to do */
	if (!find_endpoint(&ep)) {
		say("no endpoint (%s/endpoint, default route)", conf_dir);
		return 1;
	}
	snprintf(path, sizeof(path), "%s/token", run_dir);
	if (read_line(path, token, sizeof(token)) == 0) {
		say("renewing with the capability token kept in %s", run_dir);
		return renew_loop(&ep, token, 1);
	}
	snprintf(path, sizeof(path), "%s/bootstrap", conf_dir);
	if ((rc = read_line(path, value, sizeof(value))) < 0 && exists(conf_dir, "bootstrap")) {
		say("cannot read %s: %s", path, strerror(-rc));
		return 1;
	}
	if (rc < 0)
		bootstrap_from_host(&ep, value);
	rc = attest(&ep, value, token, &renew);
	wipe(value, sizeof(value));
	if (rc)
		return rc;
	rc = renew_loop(&ep, token, renew);
	wipe(token, sizeof(token));
	return rc;
}
