/* kek.h: the key-encryption key file and the `bc-controller secrets`
 * commands (kek.c): init-kek, rotate-kek, migrate, status. The file's
 * format and the envelope are common/envelope.h; the store is sealed.h. */
#ifndef BC_CTL_KEK_H
#define BC_CTL_KEK_H

#include <stdbool.h>

#include "app.h"
#include "envelope.h"

/* Create the key file at path (mode 0600, one new key) unless it exists.
 * 1 created, 0 already there, or -errno. Concurrent callers create one. */
int kek_create(const char *path);

/* Append a new key to the file at path and make it current (the old keys
 * stay, so what they wrap still opens); its id into ret_id. 0 or -errno. */
int kek_add(const char *path, char ret_id[ENVELOPE_KID_MAX]);

/* The database at the schema this binary knows, with the key file loaded
 * (sealed_keys_load), for an operator command named verb ("secrets
 * migrate"): NULL, logged, otherwise. */
struct db *kek_open_db(struct ctl_app *app, const char *verb);

/* `bc-controller secrets VERB [ARGS]`: argv[0] is VERB. Returns the
 * process exit status (0 ok, 1 failed, 2 usage). */
int kek_command(struct ctl_app *app, int argc, char **argv);

#endif
