/* iam_react.h: the IAM reactions on sandboxes (iam_react.c). */
#ifndef BC_CTL_IAM_REACT_H
#define BC_CTL_IAM_REACT_H

#include "db.h"

/* Withdraw the open sandboxes of agents no longer active or whose
 * delegation was revoked, delete those of deleted owners (reconciler
 * only). Logs; never fails. */
void iam_react_tick(struct db *d);

#endif
