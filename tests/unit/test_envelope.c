/* Unit tests of common/envelope.c: sealing and opening, a change to any
 * byte of an envelope refused, another row's authenticated data refused, a
 * wrapped data key moved to another envelope refused, KEK rotation (blobs
 * under the old key still open until rewrapped, the rewrap keeps the data
 * part byte for byte, then the old key is no longer needed), an unknown key
 * id named, and the key file's parser. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "envelope.h"
#include "util.h"
#include "tap.h"

#define AAD_A "sealed_01jdzq3m5n8p9r7s6t5v4w3x2y\0acme"
#define AAD_B "sealed_01jdzq3m5n8p9r7s6t5v4w3x2z\0acme"
#define AAD_T "sealed_01jdzq3m5n8p9r7s6t5v4w3x2y\0beta"

static struct envelope_ring *ring_new(int n)
{
	struct envelope_ring *r = NULL;
	char id[ENVELOPE_KID_MAX];

	if (envelope_ring_parse("kek_first " "00112233445566778899aabbccddeeff"
				"00112233445566778899aabbccddeeff\n", &r, NULL) < 0)
		abort();
	for (int i = 1; i < n; i++)
		if (envelope_ring_add(r, id) < 0)
			abort();
	return r;
}

static int open_aad(const struct envelope_ring *r, const char *aad, size_t aad_len,
		    const unsigned char *env, size_t n, const void *want, size_t want_len)
{
	char *out = NULL;
	size_t len = 0;
	int rc = envelope_open(r, aad, aad_len, env, n, &out, &len);

	if (rc == 0 && (len != want_len || memcmp(out, want, len) != 0))
		rc = -EILSEQ; /* opened to other bytes: worse than a refusal */
	free(out);
	return rc;
}

static void test_round_trip(void)
{
	struct envelope_ring *r = ring_new(1);
	static unsigned char big[65536];
	unsigned char *e1 = NULL, *e2 = NULL;
	size_t n1 = 0, n2 = 0;

	for (size_t i = 0; i < sizeof(big); i++)
		big[i] = (unsigned char)(i * 131 + 7);
	is_int(envelope_seal(r, AAD_A, sizeof(AAD_A), big, sizeof(big), &e1, &n1), 0,
	       "a 64 KiB blob seals");
	is_int(n1, sizeof(big) + ENVELOPE_OVERHEAD(strlen("kek_first")), "... overhead as documented");
	ok(!memmem(e1, n1, big, 64), "... the envelope does not hold the plain bytes");
	is_int(open_aad(r, AAD_A, sizeof(AAD_A), e1, n1, big, sizeof(big)), 0,
	       "... and opens to the same bytes");
	is_int(envelope_seal(r, AAD_A, sizeof(AAD_A), big, sizeof(big), &e2, &n2), 0,
	       "sealed twice");
	ok(n1 == n2 && memcmp(e1, e2, n1) != 0, "... two different envelopes (fresh key, nonces)");
	is_int(envelope_seal(r, AAD_A, sizeof(AAD_A), big, 0, &e2, &n2), -EINVAL,
	       "an empty blob is refused");
	free(e1);
	free(e2);
	envelope_ring_free(r);
}

static void test_tamper(void)
{
	struct envelope_ring *r = ring_new(2);
	const char msg[] = "canary: O'Brien said \"$HOME\" \\n \xc3\xa9";
	unsigned char *e = NULL;
	size_t n = 0, refused_flip = 0, refused_xor = 0, refused_trunc = 0;

	if (envelope_seal(r, AAD_A, sizeof(AAD_A), msg, sizeof(msg), &e, &n) < 0)
		abort();
	for (size_t i = 0; i < n; i++) {
		for (int bit = 0; bit < 8; bit++) {
			e[i] ^= (unsigned char)(1 << bit);
			refused_flip += open_aad(r, AAD_A, sizeof(AAD_A), e, n, msg, sizeof(msg)) < 0;
			e[i] ^= (unsigned char)(1 << bit);
		}
		e[i] ^= 0xff;
		refused_xor += open_aad(r, AAD_A, sizeof(AAD_A), e, n, msg, sizeof(msg)) < 0;
		e[i] ^= 0xff;
		refused_trunc += open_aad(r, AAD_A, sizeof(AAD_A), e, i, msg, sizeof(msg)) < 0;
	}
	is_int(refused_flip, 8 * n, "every one-bit change at every one of the %zu bytes is refused", n);
	is_int(refused_xor, n, "every byte inverted is refused");
	is_int(refused_trunc, n, "every truncation is refused");
	{
		unsigned char *longer = xmalloc(n + 1);
		memcpy(longer, e, n);
		longer[n] = 0;
		ok(open_aad(r, AAD_A, sizeof(AAD_A), longer, n + 1, msg, sizeof(msg)) < 0,
		   "a byte appended is refused");
		free(longer);
	}
	is_int(open_aad(r, AAD_A, sizeof(AAD_A), e, n, msg, sizeof(msg)), 0,
	       "control: the untouched envelope opens");
	free(e);
	envelope_ring_free(r);
}

static void test_aad(void)
{
	struct envelope_ring *r = ring_new(1);
	const char msg[] = "user data of row A";
	unsigned char *a = NULL, *b = NULL;
	size_t na = 0, nb = 0, hdr;

	envelope_seal(r, AAD_A, sizeof(AAD_A), msg, sizeof(msg), &a, &na);
	envelope_seal(r, AAD_B, sizeof(AAD_B), msg, sizeof(msg), &b, &nb);
	is_int(open_aad(r, AAD_B, sizeof(AAD_B), a, na, msg, sizeof(msg)), -EBADMSG,
	       "row A's envelope copied to row B does not open");
	is_int(open_aad(r, AAD_T, sizeof(AAD_T), a, na, msg, sizeof(msg)), -EBADMSG,
	       "row A's envelope with another tenant does not open");
	is_int(open_aad(r, AAD_A, sizeof(AAD_A) - 1, a, na, msg, sizeof(msg)), -EBADMSG,
	       "a shortened tenant does not open");
	is_int(open_aad(r, AAD_A, sizeof(AAD_A), a, na, msg, sizeof(msg)), 0,
	       "control: row A opens with its own ref and tenant");
	/* B's wrapped data key spliced into A's envelope (the header is the
	 * same length: same key id) */
	hdr = 5 + strlen("kek_first") + 12 + 32 + 16;
	memcpy(a, b, hdr);
	is_int(open_aad(r, AAD_A, sizeof(AAD_A), a, na, msg, sizeof(msg)), -EBADMSG,
	       "another row's wrapped data key spliced in does not open");
	free(a);
	free(b);
	envelope_ring_free(r);
}

static void test_rotation(void)
{
	struct envelope_ring *r = ring_new(1), *only_new = NULL, *only_old = ring_new(1);
	enum { N = 20 };
	unsigned char *env[N], *re[N];
	size_t len[N], relen[N], hdr_old = 5 + strlen("kek_first") + 12 + 32 + 16, hdr_new;
	char msg[N][32], kid[ENVELOPE_KID_MAX], newid[ENVELOPE_KID_MAX];
	int opened_old = 0, opened_re = 0, kept_data = 0, named_new = 0, rewrapped = 0;
	int only_new_ok = 0, only_old_refused = 0;
	char *text;

	for (int i = 0; i < N; i++) {
		snprintf(msg[i], sizeof(msg[i]), "blob %d", i);
		envelope_seal(r, AAD_A, sizeof(AAD_A), msg[i], strlen(msg[i]), &env[i], &len[i]);
	}
	is_int(envelope_ring_add(r, newid), 0, "a new key is added");
	is_str(envelope_ring_current(r)->id, newid, "... and is current");
	hdr_new = 5 + strlen(newid) + 12 + 32 + 16;
	is_int(envelope_key_id(env[0], len[0], kid), 0, "an old envelope names its key");
	is_str(kid, "kek_first", "... the old one");
	for (int i = 0; i < N; i++) {
		opened_old += open_aad(r, AAD_A, sizeof(AAD_A), env[i], len[i], msg[i],
				       strlen(msg[i])) == 0;
		rewrapped += envelope_rewrap(r, AAD_A, sizeof(AAD_A), env[i], len[i], &re[i],
					     &relen[i]) == 0;
		envelope_key_id(re[i], relen[i], kid);
		named_new += strcmp(kid, newid) == 0;
		kept_data += relen[i] - hdr_new == len[i] - hdr_old &&
			     memcmp(re[i] + hdr_new, env[i] + hdr_old, len[i] - hdr_old) == 0;
		opened_re += open_aad(r, AAD_A, sizeof(AAD_A), re[i], relen[i], msg[i],
				      strlen(msg[i])) == 0;
	}
	is_int(opened_old, N, "every blob under the old key still opens before its rewrap");
	is_int(rewrapped, N, "every data key is rewrapped");
	is_int(named_new, N, "... each envelope now names the new key");
	is_int(kept_data, N, "... with its data part (nonce, tag, ciphertext) kept byte for byte");
	is_int(opened_re, N, "... and opens to the same bytes");

	/* the old key retired: a ring of the new key alone */
	text = envelope_ring_format(r);
	*strstr(text, "kek_first") = '#'; /* the old key's line commented out */
	is_int(envelope_ring_parse(text, &only_new, NULL), 0, "the file without the old key parses");
	is_int(only_new->n, 1, "... one key");
	for (int i = 0; i < N; i++) {
		only_new_ok += open_aad(only_new, AAD_A, sizeof(AAD_A), re[i], relen[i], msg[i],
					strlen(msg[i])) == 0;
		only_old_refused += open_aad(only_old, AAD_A, sizeof(AAD_A), re[i], relen[i], msg[i],
					     strlen(msg[i])) == -ENOKEY;
	}
	is_int(only_new_ok, N, "rewrapped blobs open without the old key");
	is_int(only_old_refused, N, "... and not with the old key alone: -ENOKEY");
	is_int(open_aad(only_new, AAD_A, sizeof(AAD_A), env[0], len[0], msg[0], strlen(msg[0])),
	       -ENOKEY, "a blob never rewrapped needs the old key: unknown key id");
	{
		unsigned char *x = NULL;
		size_t xn = 0;
		is_int(envelope_rewrap(only_new, AAD_A, sizeof(AAD_A), env[0], len[0], &x, &xn),
		       -ENOKEY, "... and cannot be rewrapped without it");
		free(x);
	}
	free(text);
	for (int i = 0; i < N; i++) {
		free(env[i]);
		free(re[i]);
	}
	envelope_ring_free(r);
	envelope_ring_free(only_new);
	envelope_ring_free(only_old);
}

static void test_ring_file(void)
{
	struct envelope_ring *r = ring_new(3), *back = NULL;
	char *text = envelope_ring_format(r);
	const char *k64 = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
	char buf[512];
	int line = -1;

	is_int(envelope_ring_parse(text, &back, NULL), 0, "a formatted ring parses back");
	ok(back && back->n == 3 && memcmp(back->keys, r->keys, 3 * sizeof(*r->keys)) == 0,
	   "... the same three keys in the same order");
	is_str(envelope_ring_current(back)->id, r->keys[2].id, "... the last one current");
	envelope_ring_free(back);
	back = NULL;

	is_int(envelope_ring_parse("# only a comment\n\n", &back, &line), -EBADMSG,
	       "a file without a key is refused");
	snprintf(buf, sizeof(buf), "# c\nkek_a %s\nkek_b %.62s\n", k64, k64);
	is_int(envelope_ring_parse(buf, &back, &line), -EBADMSG, "a short key is refused");
	is_int(line, 3, "... at its line");
	snprintf(buf, sizeof(buf), "kek_a %s\nkek_a %s\n", k64, k64);
	is_int(envelope_ring_parse(buf, &back, &line), -EEXIST, "a key id twice is refused");
	snprintf(buf, sizeof(buf), "kek/a %s\n", k64);
	is_int(envelope_ring_parse(buf, &back, &line), -EBADMSG, "a key id with a '/' is refused");
	snprintf(buf, sizeof(buf), "kek_a %.63sg\n", k64);
	is_int(envelope_ring_parse(buf, &back, &line), -EBADMSG, "a key that is not hex is refused");
	snprintf(buf, sizeof(buf), "kek_a  %s \r\n", k64);
	is_int(envelope_ring_parse(buf, &back, &line), 0, "extra blanks and CRLF are accepted");
	envelope_ring_free(back);
	free(text);
	envelope_ring_free(r);
}

int main(void)
{
	test_round_trip();
	test_tamper();
	test_aad();
	test_rotation();
	test_ring_file();
	done_testing();
}
