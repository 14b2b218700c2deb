# tenant.sh: acting as a tenant's identities in integration tests, sourced
# after stack.sh (its bcctl and json_get; the functions run after stack_up).
#
#   . "$(dirname "$0")/../lib/stack.sh"
#   . "$(dirname "$0")/../lib/tenant.sh"
#   stack_up ...
#   bcctl tenant create acme >/dev/null
#   alice=$(tenant_identity acme user alice); A=$(tenant_token "$alice")
#   refused "$A" 5 'action: compute:instances:create' 'alice may not create' -- instance create ...
#
#   q SQL                               psql on the stack's database, unaligned
#   jid JSON                            the "id" of a JSON reply
#   as TOKEN ARGS...                    bcctl as another identity
#   refused TOKEN EXIT DETAIL MSG -- ARGS...
#                                       bcctl ARGS as TOKEN must exit EXIT and,
#                                       unless DETAIL is empty, say DETAIL on stderr
#   tenant_identity TENANT KIND NAME [FLAGS...]
#                                       a new identity (--admin among FLAGS), its id
#   tenant_token IDENTITY               a new API token of IDENTITY

q() { psql -d bc -XAtq -c "$1"; }
jid() { json_get "$1" id; }
as() { local tok=$1; shift; BC_TOKEN=$tok bcctl "$@"; }

refused() {
	local tok=$1 want=$2 detail=$3 msg=$4 rc
	shift 5
	as "$tok" "$@" >/dev/null 2>"$STACK_DIR/err"
	rc=$?
	is "$rc" "$want" "$msg: exit $want"
	[ -z "$detail" ] || like "$(cat "$STACK_DIR/err")" "$detail" "$msg: names $detail"
}

tenant_identity() {
	local tenant=$1 kind=$2 name=$3
	shift 3
	jid "$(bcctl --format json identity create --tenant "$tenant" --kind "$kind" --name "$name" "$@")"
}

tenant_token() { json_get "$(bcctl --format json token create --identity "$1")" token; }
