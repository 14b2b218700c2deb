/* log.h: structured one-line logs to stderr: ts=... level=... msg="..." k=v.
 * Daemons log; common/ code only at debug. */
#ifndef BC_LOG_H
#define BC_LOG_H

enum log_level { LOG_LVL_DEBUG, LOG_LVL_INFO, LOG_LVL_WARN, LOG_LVL_ERROR };

/* Process-wide settings; call once at start-up. name tags every line. */
void log_init(const char *name, enum log_level min_level);
/* Parse "debug|info|warn|error"; -EINVAL if unknown. */
int log_level_parse(const char *s, enum log_level *ret);

void log_msg(enum log_level lvl, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define log_debug(...) log_msg(LOG_LVL_DEBUG, __VA_ARGS__)
#define log_info(...) log_msg(LOG_LVL_INFO, __VA_ARGS__)
#define log_warn(...) log_msg(LOG_LVL_WARN, __VA_ARGS__)
#define log_error(...) log_msg(LOG_LVL_ERROR, __VA_ARGS__)

/* Log at error level and exit(1). */
void fatal(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

#endif
