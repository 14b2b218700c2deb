# grpc_nul.t: a NUL in any string field of a gRPC request is refused
# INVALID_INPUT "NUL character in string" (as the JSON/HTTP transport does)
# instead of reaching the handler cut at the NUL: a template name, a sandbox
# id, an idempotency key, user data, a map value, each leaving no row
# behind. Control: the same requests with normal strings succeed. Calls go
# over real gRPC (grpc_call.js, @grpc/grpc-js) with the admin token.
. "$(dirname "$0")/../lib/stack.sh"

stack_up --controllers 1 --agents 1 || bail_out "stack_up failed"
img=$(stack_image_create nul-img) || bail_out "no image"
q() { psql -d bc -XAtq -c "$1"; }
P=bc/compute/v1/sandboxes.proto
call() { # SERVICE METHOD JSON -> OUT, returns the client's status
	OUT=$(BC_TOKEN=$BC_TOKEN node "$BC_SRC/tests/integration/grpc_call.js" "$BC_URL" \
		"$BC_CA_FILE" - - "$P" "bc.compute.v1.$1" "$2" "$3")
}
# refused DESC SERVICE METHOD JSON: INVALID_ARGUMENT with our message
refused() {
	local desc=$1
	shift
	call "$@"
	is "$(jq -r .code <<<"$OUT") $(jq -r .details <<<"$OUT")" \
		'3 NUL character in string' "$desc: refused INVALID_INPUT"
}
base="\"pool_id\":\"$POOL_ID\",\"flavor\":\"$FLAVOR_NAME\",\"image_id\":\"$img\""

# control: normal strings
call SandboxTemplates Create "{\"name\":\"tmpl-ok\",$base,\"user_data\":\"#!/bin/sh\\necho one\"}"
ok $? 'control: a template with normal strings is created' || diag "$OUT"
tmpl=$(jq -r .id <<<"$OUT")
like "$tmpl" '^sbxt_' '... its id'
call Sandboxes Create "{\"template_id\":\"$tmpl\",\"idempotency_key\":\"k1\"}"
ok $? 'control: a sandbox with an idempotency key is created' || diag "$OUT"
sbx=$(jq -r .id <<<"$OUT")
like "$sbx" '^sbx_' '... its id'
call Sandboxes Get "{\"sandbox_id\":\"$sbx\"}"
ok $? 'control: Sandboxes.Get by its id answers'
ntmpl=$(q "SELECT count(*) FROM sandbox_templates")
nsbx=$(q "SELECT count(*) FROM sandboxes")
nidem=$(q "SELECT count(*) FROM idempotency_keys")

refused 'a template name "nul\0byte"' SandboxTemplates Create "{\"name\":\"nul\\u0000byte\",$base}"
is "$(q "SELECT count(*) FROM sandbox_templates WHERE name LIKE 'nul%'")" 0 '... no template row'
refused "a sandbox id \"<id>\\0junk\"" Sandboxes Get "{\"sandbox_id\":\"$sbx\\u0000junk\"}"
refused 'an idempotency key "k\0x"' Sandboxes Create \
	"{\"template_id\":\"$tmpl\",\"idempotency_key\":\"k\\u0000x\"}"
is "$(q "SELECT count(*) FROM sandboxes")" "$nsbx" '... no sandbox row'
is "$(q "SELECT count(*) FROM idempotency_keys")" "$nidem" '... no idempotency key row'
refused 'user data "echo one\0echo two"' SandboxTemplates Create \
	"{\"name\":\"tmpl-ud\",$base,\"user_data\":\"#!/bin/sh\\necho one\\u0000echo two\"}"
refused 'a map value (nested entry message)' SandboxTemplates Create \
	"{\"name\":\"tmpl-env\",$base,\"env\":{\"A\":\"x\\u0000y\"}}"
refused 'a map key' SandboxTemplates Create "{\"name\":\"tmpl-env2\",$base,\"env\":{\"A\\u0000B\":\"x\"}}"
is "$(q "SELECT count(*) FROM sandbox_templates")" "$ntmpl" '... no template row for any of them'

# control after the refusals: the same shapes with normal strings
call SandboxTemplates Create "{\"name\":\"tmpl-ud\",$base,\"user_data\":\"#!/bin/sh\\necho one; echo two\"}"
ok $? 'control: the user data without a NUL is accepted' || diag "$OUT"
is "$(q "SELECT count(*) FROM sandbox_templates")" "$((ntmpl + 1))" '... one more template row'
done_testing
