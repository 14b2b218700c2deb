/* sandbox_ca.h: the deployment's sandbox SSH CA (sandbox_ca.c): its key
 * file, made by `bc-controller init` and `bc-controller pki
 * add-sandbox-ca`, and its loading for the code that signs with it. */
#ifndef BC_CTL_SANDBOX_CA_H
#define BC_CTL_SANDBOX_CA_H

#include <stdbool.h>

#include "app.h"
#include "sshcert.h"

/* Make the CA key (sandbox_ca_key_file, 0600) and its public line (the
 * same path with .pub for .key, 0644). An existing key is kept (0), or
 * refused (-EEXIST) when refuse_existing. Logs what it did. The public
 * line in *ret_line if not NULL (malloc'd). 0 or -errno. */
int sandbox_ca_create(const struct ctl_app *app, bool refuse_existing, char **ret_line);

/* Load the CA from sandbox_ca_key_file: -ENOENT when the deployment has
 * none (the caller answers UNSUPPORTED), -EBADMSG/-EINVAL for a file that
 * is not an ed25519 key. Nothing logged. */
int sandbox_ca_load(const struct ctl_app *app, struct sshcert_ca **ret);

/* serve: load the CA into app->sandbox_ca and its public line into
 * app->sandbox_ca_line, or say once that there is none (Sandboxes.Exec is
 * then UNSUPPORTED). Fails only for a CA file that exists and cannot be
 * used. sandbox_ca_unload frees both. */
int sandbox_ca_serve(struct ctl_app *app);
void sandbox_ca_unload(struct ctl_app *app);
/* `bc-controller pki VERB`: add-sandbox-ca. 0, or 1 (refused or failed,
 * said on stderr), 2 (usage). */
int sandbox_ca_command(struct ctl_app *app, int argc, char **argv);

#endif
