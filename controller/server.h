/* server.h: the API server (server.c): TLS, workers, the service table. */
#ifndef BC_CTL_SERVER_H
#define BC_CTL_SERVER_H

#include "app.h"

/* Read the server certificate, create the server with every service of
 * the table, start the waiters, /metrics, the server and the background
 * threads. 0, or -errno (logged) with nothing left running. */
int server_start(struct ctl_app *app);
/* Stop what server_start started, in order (a grace for calls first). */
void server_stop(struct ctl_app *app);

#endif
