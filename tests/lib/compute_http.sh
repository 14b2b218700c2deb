# compute_http.sh: the compute API over JSON/HTTP in integration tests,
# sourced after stack.sh; the controller listens with http_listen =
# 127.0.0.1:$HTTP_PORT.
#
#   api TOKEN METHOD JSON               POST /api/compute/METHOD ("sandboxes/create"):
#                                       the body, then the HTTP status on its own line
#   api_refused TOKEN METHOD JSON STATUS CODE KEY=VALUE|- MSG
#                                       the call must answer HTTP STATUS with error
#                                       CODE and, unless "-", details.KEY = VALUE

api() {
	curl -sS --cacert "$BC_CA_FILE" -H "Authorization: Bearer $1" \
		-H 'Content-Type: application/json' -w '\n%{http_code}' --data-binary "$3" \
		"https://127.0.0.1:$HTTP_PORT/api/compute/$2"
}

api_refused() {
	local out k=${6%%=*} v=${6#*=}
	out=$(api "$1" "$2" "$3")
	is "$(printf '%s\n' "$out" | tail -n 1)" "$4" "$7: HTTP $4"
	if [ "$6" = - ]; then
		is "$(printf '%s\n' "$out" | sed '$d' | jq -r .error.code)" "$5" "$7: $5"
	else
		is "$(printf '%s\n' "$out" | sed '$d' | jq -r ".error.code + \" \" + (.error.details.\"$k\" // \"-\")")" \
			"$5 $v" "$7: $5 with $k=$v"
	fi
}
