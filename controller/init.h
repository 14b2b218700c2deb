/* init.h: `bc-controller init` and the PKI serve loads (init.c). */
#ifndef BC_CTL_INIT_H
#define BC_CTL_INIT_H

#include <stdbool.h>

#include "app.h"

/* Create what a controller needs (API CA and server certificate, node CA,
 * the sandbox SSH CA, migrations, root tenant) and, when asked or first, an admin token
 * printed once. 0 or -errno (logged). */
int init_run(struct ctl_app *app, bool new_admin_token);
/* Load the CAs of pki_dir into app (api_ca_pem, node_ca_pem,
 * node_ca_key_pem). 0 or -errno (logged). */
int pki_load(struct ctl_app *app);
/* Reissue server.pem/server.key from the API CA (same SANs: localhost,
 * loopback and api_san) when it expires within server_cert_renew_days
 * (0: never); 0 or -errno. Called by serve before it listens. */
int init_renew_server_cert(struct ctl_app *app);

#endif
