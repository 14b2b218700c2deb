/* Unit tests of cols_count (controller/rowmsg.h), which COLS_CHECK uses to
 * keep each *_COLS list and the enum of its columns in step: commas inside
 * function calls, subselects and '...' literals (E'\n', '', ', ') do not
 * separate columns, the MS() epoch wrapper is one column, and the real
 * lists' shapes count as their enums say. */
#include "controller/rowmsg.h"
#include "tap.h"

/* the shapes of the real lists: a subselect with a LIMIT, literals with
 * commas, an array_to_string with E'\n', MS() */
#define LIST_LIKE_INST                                                                     \
	"i.id, coalesce(i.node_id, ''), array_to_string(i.ssh_keys, E'\\n'), "               \
	MS("i.created_at") ", coalesce(" MS("i.deleted_at") ", 0), coalesce((SELECT "       \
	"host(l.address) FROM ip_leases l WHERE l.instance_id = i.id LIMIT 1), ''), "       \
	"(SELECT a.agent_id FROM authz_resources a WHERE a.type = 'compute-instance' AND "   \
	"a.id = i.id)"
enum { L_ID, L_NODE_ID, L_SSH_KEYS, L_CREATED_AT, L_DELETED_AT, L_IPV4, L_AGENT, L_NCOLS };

#define LIST_LIKE_TMPL                                                                     \
	"t.id, (SELECT count(*) FILTER (WHERE w.state IN ('paused', 'stopped')) || ' ' || " \
	"count(*) FROM instances w WHERE w.warm_template_id = t.id)"

int main(void)
{
	is_int(cols_count(""), 0, "an empty list has no column");
	is_int(cols_count("  "), 0, "nor has a blank one");
	is_int(cols_count("id"), 1, "one column");
	is_int(cols_count("id, name, state"), 3, "top-level commas separate columns");
	is_int(cols_count("coalesce(a, b, c), d"), 2, "commas inside a call do not");
	is_int(cols_count("f(g(a, b), c), d"), 2, "nor inside nested calls");
	is_int(cols_count("', ', x"), 2, "nor inside a literal");
	is_int(cols_count("'(', x, ')'"), 3, "parentheses inside literals are text");
	is_int(cols_count("coalesce(x, ''), y"), 2, "an empty literal closes itself");
	is_int(cols_count(MS("created_at")), 1, "MS() is one column");
	is_int(cols_count(LIST_LIKE_INST), L_NCOLS, "an INST_COLS-like list: %d columns", L_NCOLS);
	is_int(cols_count(LIST_LIKE_TMPL), 2, "a TMPL_COLS-like subselect with literals is one");
	done_testing();
}
