/* tunneldrv: the controller's tunnel dialer (controller/node_tunnel.c)
 * driven from a test. Loads a controller configuration, dials NODE's bcd
 * for port 22 of INSTANCE with node_tunnel_dial, then relays stdin to the
 * tunnel on one thread and the tunnel to stdout on another (the two at
 * once, as the controller's relay does); stdin's EOF half-closes.
 *
 *   tunneldrv CONFIG NODE INSTANCE [SLOW_US_PER_KIB]
 *
 * SLOW_US_PER_KIB makes a slow reader: it sleeps that long per KiB
 * received before taking the next chunk. Exit 0 when the tunnel ended OK,
 * 3 with "error CODE: message" on stderr when it was refused or failed. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "controller/app.h"
#include "bc/node/v1/agent.pb-c.h"
#include "controller/config.h"
#include "controller/db.h"
#include "controller/init.h"
#include "log.h"
#include "controller/node_tunnel.h"
#include "pki.h"
#include "rpc.h"
#include "util.h"

static void *pump_stdin_raw(void *arg)
{
	struct tlsc *c = arg;
	static uint8_t buf[32 * 1024];
	ssize_t n;

	while ((n = read(0, buf, sizeof(buf))) > 0)
		if (tlsc_write_all(c, buf, (size_t)n) < 0)
			return NULL;
	tlsc_close_write(c);
	return NULL;
}

/* raw: the host's bytes to stdout; 0 at its close_notify */
static int raw_out(struct tlsc *c, long slow)
{
	static uint8_t buf[256 * 1024];

	for (;;) {
		ssize_t n = tlsc_read(c, buf, sizeof(buf), -1);
		if (n <= 0)
			return n == 0 ? 0 : 5;
		if (fwrite(buf, 1, (size_t)n, stdout) != (size_t)n)
			return 4;
		fflush(stdout);
		if (slow)
			usleep((useconds_t)(slow * (long)((n + 1023) / 1024)));
	}
}

static void *pump_stdin(void *arg)
{
	rpc_stream *st = arg;
	Bc__Node__V1__TunnelChunk c = BC__NODE__V1__TUNNEL_CHUNK__INIT;
	static uint8_t buf[32 * 1024];
	ssize_t n;

	while ((n = read(0, buf, sizeof(buf))) > 0) {
		c.data.data = buf;
		c.data.len = (size_t)n;
		if (rpc_stream_send(st, &c.base) < 0)
			return NULL;
	}
	rpc_stream_close_send(st);
	return NULL;
}

static int fail(const bc_error *err)
{
	fprintf(stderr, "error %s: %s\n", bc_code_name(err->code), err->message);
	return 3;
}

static void app_free(struct ctl_app *app)
{
	free(app->api_ca_pem);
	free(app->node_ca_pem);
	pki_free_secret(app->node_ca_key_pem);
	config_free(&app->cfg);
}

int main(int argc, char **argv)
{
	struct ctl_app app;
	struct db *d = NULL;
	struct node_tun nt = {0};
	rpc_stream *st = NULL;
	bc_error err = {0};
	pthread_t th;
	long slow = argc > 4 ? atol(argv[4]) : 0;
	int r, rc = 0;

	if (argc < 4) {
		fprintf(stderr, "usage: tunneldrv CONFIG NODE INSTANCE [SLOW_US_PER_KIB]\n");
		return 2;
	}
	signal(SIGPIPE, SIG_IGN);
	memset(&app, 0, sizeof(app));
	if (config_load(&app.cfg, argv[1], 0, NULL, 0) < 0)
		return 2;
	log_init("tunneldrv", LOG_LVL_WARN);
	if (pki_load(&app) < 0 || !(d = db_open(app.cfg.database))) {
		app_free(&app);
		return 2;
	}
	rpc_global_init();
	if (node_tunnel_dial(&app, d, argv[2], argv[3], "tun_test", &nt, &err) < 0) {
		rc = fail(&err);
		goto out;
	}
	/* which protocol the dialer chose, for the tests */
	if (getenv("TUNNELDRV_SAY_PROTOCOL"))
		fprintf(stderr, "protocol %s\n", nt.raw ? "raw" : "grpc");
	if (nt.raw) {
		pthread_create(&th, NULL, pump_stdin_raw, nt.raw);
		rc = raw_out(nt.raw, slow);
		if (rc)
			tlsc_cancel(nt.raw);
		pthread_join(th, NULL);
		goto out;
	}
	st = nt.st;
	pthread_create(&th, NULL, pump_stdin, st);
	for (;;) {
		ProtobufCMessage *m = NULL;
		const Bc__Node__V1__TunnelChunk *c;

		r = rpc_stream_recv(st, &bc__node__v1__tunnel_chunk__descriptor, &m, -1, &err);
		if (r != 1)
			break;
		c = (const void *)m;
		if (c->data.len && fwrite(c->data.data, 1, c->data.len, stdout) != c->data.len)
			r = -EIO;
		fflush(stdout);
		if (slow)
			usleep((useconds_t)(slow * (long)((c->data.len + 1023) / 1024)));
		protobuf_c_message_free_unpacked(m, NULL);
		if (r < 0)
			break;
	}
	/* a refused or broken stream: its status ends the sender's sends */
	if (r != 0)
		rc = r == -EIO ? 4 : fail(&err);
	pthread_join(th, NULL);
out:
	node_tun_free(&nt);
	node_tunnel_shutdown();
	db_close(d);
	app_free(&app);
	rpc_global_shutdown();
	return rc;
}
