# bench/seal.sh: the sealed store's rows of `make bench`, sourced by
# bench/run.sh (it needs run.sh's field and row; no stack).
#
#   seal + unseal 64 KiB    bench_seal: envelope_seal + envelope_open of a
#                           64 KiB blob (new data key, wrap, AES-256-GCM,
#                           unwrap, decrypt, both tags), p50 of single pairs
#   ... bytea hex text      the envelope to hex text and back, as sealed.c
#                           sends it to PostgreSQL and reads it (p50)
#
# both beside `openssl speed -evp aes-256-gcm` at 16 KiB blocks, measured
# here in the same run: the time that cipher takes on this machine for the
# 128 KiB (64 KiB encrypted, 64 KiB decrypted) of one seal + unseal.

log "sealing: seal + unseal 64 KiB vs openssl speed -evp aes-256-gcm, 16 KiB blocks"
seal_out=$("$BC_SRC/build/bench/bench_seal" 2>>"$STACK_DIR/bench-client.log")
# -mr: "+F:<n>:AES-256-GCM:<bytes per second at 16384-byte blocks>"
gcm_bps=$(openssl speed -evp aes-256-gcm -bytes 16384 -seconds 2 -mr 2>/dev/null |
	awk -F: '/^\+F:/ { print $4 }')
gcm_us=
[ -n "$gcm_bps" ] && gcm_us=$(awk -v b="$gcm_bps" 'BEGIN { printf "%.1f", 2 * 65536 / b * 1e6 }')
row "seal + unseal 64 KiB" p50_us "$(field "$seal_out" seal_open_us)" \
	"openssl aes-256-gcm 128 KiB" "$gcm_us"
row "seal + unseal 64 KiB: bytea hex text" p50_us "$(field "$seal_out" hex_us)" \
	"openssl aes-256-gcm 128 KiB" "$gcm_us"
