/* log.c: one key=value line per event on stderr. */
#include "log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *log_name = "bc";
static enum log_level log_min = LOG_LVL_INFO;
static const char *const level_names[] = {"debug", "info", "warn", "error"};

void log_init(const char *name, enum log_level min_level)
{
	log_name = name;
	log_min = min_level;
}

int log_level_parse(const char *s, enum log_level *ret)
{
	for (int i = 0; i < 4; i++)
		if (s && strcmp(s, level_names[i]) == 0) {
			*ret = (enum log_level)i;
			return 0;
		}
	return -EINVAL;
}

static void log_v(enum log_level lvl, const char *fmt, va_list ap)
{
	char msg[2048], ts[40];
	struct timespec t;
	struct tm tm;

	if (lvl < log_min)
		return;
	clock_gettime(CLOCK_REALTIME, &t);
	gmtime_r(&t.tv_sec, &tm);
	strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%S", &tm);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	/* one write per line so concurrent threads never interleave */
	fprintf(stderr, "ts=%s.%03ldZ level=%s proc=%s %s\n", ts, t.tv_nsec / 1000000,
		level_names[lvl], log_name, msg);
}

void log_msg(enum log_level lvl, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	log_v(lvl, fmt, ap);
	va_end(ap);
}

void fatal(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	log_v(LOG_LVL_ERROR, fmt, ap);
	va_end(ap);
	exit(1);
}
