/* migrate.h: the schema (migrate.c): numbered forward-only migrations
 * under an advisory lock, with checksums. */
#ifndef BC_CTL_MIGRATE_H
#define BC_CTL_MIGRATE_H

#include "db.h"

/* The newest schema version this binary knows; equals the number of files in
 * migrations/ (checked by a unit test). serve refuses any other version. */
#define CTL_SCHEMA_VERSION 26

/* Apply the migrations of dir not applied yet; the version after in
 * *ret_version. 0 or -errno (logged). */
int migrate_apply(struct db *d, const char *dir, int *ret_version);
/* The schema version of the database (0: none yet). 0 or -errno. */
int migrate_current(struct db *d, int *ret_version);
/* The migrations directory: configured, or the default one found. */
const char *migrate_default_dir(const char *configured);

#endif
