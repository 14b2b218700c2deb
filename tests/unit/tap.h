/* tap.h: a tiny TAP producer for the C unit tests, run by prove. */
#ifndef BC_TAP_H
#define BC_TAP_H

#include <stdio.h>
#include <string.h>

static int tap_n, tap_failed;

#define ok(cond, ...)                                                         \
	do {                                                                  \
		int ok_c_ = !!(cond);                                         \
		tap_n++;                                                      \
		if (!ok_c_)                                                   \
			tap_failed++;                                         \
		printf("%sok %d - ", ok_c_ ? "" : "not ", tap_n);             \
		printf(__VA_ARGS__);                                          \
		printf("\n");                                                 \
		if (!ok_c_)                                                   \
			printf("#   failed at %s:%d: %s\n", __FILE__, __LINE__, #cond); \
		fflush(stdout);                                               \
	} while (0)

#define is_int(got, want, ...)                                                \
	do {                                                                  \
		long long g_ = (long long)(got), w_ = (long long)(want);      \
		ok(g_ == w_, __VA_ARGS__);                                    \
		if (g_ != w_)                                                 \
			printf("#   got %lld, want %lld\n", g_, w_);          \
	} while (0)

#define is_str(got, want, ...)                                                \
	do {                                                                  \
		const char *g_ = (got), *w_ = (want);                         \
		int e_ = g_ && w_ && strcmp(g_, w_) == 0;                     \
		ok(e_, __VA_ARGS__);                                          \
		if (!e_)                                                      \
			printf("#   got '%s', want '%s'\n", g_ ? g_ : "(null)", \
			       w_ ? w_ : "(null)");                           \
	} while (0)

#define done_testing()                                                        \
	do {                                                                  \
		printf("1..%d\n", tap_n);                                     \
		return tap_failed ? 1 : 0;                                    \
	} while (0)

#endif
