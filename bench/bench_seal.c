/* bench_seal.c: the cost of the sealed store's cipher work for `make
 * bench`: common/envelope.c sealing a 64 KiB blob (a new data key, wrapped
 * under the key-encryption key, AES-256-GCM of the data) and opening it
 * again (unwrap, decrypt, check both tags), p50 of single pairs; and the
 * bytea hex text sealed.c sends to PostgreSQL and reads back (util.c's
 * hex_encode of the envelope, then decoding it). Prints one key=value line:
 *
 *   seal_open_us   envelope_seal + envelope_open of 64 KiB (p50, µs)
 *   hex_us         the envelope to hex text and back (p50, µs)
 *
 * bench/run.sh prints them beside `openssl speed -evp aes-256-gcm` at 16
 * KiB blocks measured in the same run: the cipher's floor on this machine
 * for the 128 KiB a seal and an open encrypt and decrypt. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "envelope.h"
#include "util.h"

#define BLOB (64 * 1024)
#define RUNS 2001

static const char aad[] = "sealed_01jdzq3m5n8p9r7s6t5v4w3x2y\0acme";

static int cmp(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

	return x < y ? -1 : x > y;
}

static int64_t median(int64_t *v)
{
	qsort(v, RUNS, sizeof(v[0]), cmp);
	return v[RUNS / 2];
}

static int hexval(char c)
{
	return c <= '9' ? c - '0' : c - 'a' + 10;
}

int main(void)
{
	static int64_t seal_t[RUNS], hex_t[RUNS];
	struct envelope_ring *ring = NULL;
	unsigned char *blob = xmalloc(BLOB), *env = NULL, *back;
	char id[ENVELOPE_KID_MAX], *hex, *plain = NULL;
	size_t n = 0, len = 0;

	if (random_bytes(blob, BLOB) < 0 ||
	    envelope_ring_parse("kek_a 00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff\n",
				&ring, NULL) < 0 || envelope_ring_add(ring, id) < 0)
		abort();
	for (int i = 0; i < RUNS; i++) {
		int64_t t0 = mono_us();
		if (envelope_seal(ring, aad, sizeof(aad), blob, BLOB, &env, &n) < 0 ||
		    envelope_open(ring, aad, sizeof(aad), env, n, &plain, &len) < 0 || len != BLOB)
			abort();
		seal_t[i] = mono_us() - t0;
		free(plain);
		hex = xmalloc(2 * n + 1);
		back = xmalloc(n);
		t0 = mono_us();
		hex_encode(env, n, hex);
		for (size_t j = 0; j < n; j++)
			back[j] = (unsigned char)(hexval(hex[2 * j]) << 4 | hexval(hex[2 * j + 1]));
		hex_t[i] = mono_us() - t0;
		if (memcmp(back, env, n) != 0)
			abort();
		free(hex);
		free(back);
		free(env);
	}
	printf("seal_open_us=%.1f hex_us=%.1f\n", (double)median(seal_t),
	       (double)median(hex_t));
	envelope_ring_free(ring);
	free(blob);
	return 0;
}
