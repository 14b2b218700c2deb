/* cli.h: bcctl's internal interfaces, shared by the files of cli/ only.
 *
 * bcctl is a thin client: main.c resolves the connection settings and
 * dispatches "NOUN VERB" from one table; args.c parses each verb's typed
 * flag table; one file per noun (pool.c, flavor.c, image.c, node.c,
 * instance.c) maps flags onto a protobuf-c request and calls cli_run();
 * output.c prints the reply as JSON (pbjson) or as text tables, and errors.
 *
 * Verb functions return 0, CLI_DONE (help printed: exit 0), -EINVAL (a
 * usage error, already printed: exit 1) or -BC_EDOMAIN with ctx->err
 * filled (printed by main: exit bc_code_exit_status()). */
#ifndef BC_CLI_H
#define BC_CLI_H

#include <protobuf-c/protobuf-c.h>
#include <pthread.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "err.h"
#include "mcp.h"
#include "rpc.h"

#ifndef BC_VERSION
#define BC_VERSION "0.1.0-dev"
#endif

#define CLI_DONE 1

/* Bounds on what a user can pass. */
#define CLI_MAX_FLAGS 32          /* per verb, plus the global ones */
#define CLI_MAX_REPEAT 64         /* values of one repeated flag */
#define CLI_USER_DATA_MAX 65536   /* --user-data-file */
#define CLI_DEFAULT_URL "127.0.0.1:7443"
#define CLI_DEFAULT_TIMEOUT_MS 30000

enum cli_format { CLI_FMT_TABLE, CLI_FMT_JSON };

enum cli_flag_type {
	CLI_STR,        /* char **: borrowed from argv */
	CLI_STRS,       /* struct cli_strv *: repeated, borrowed from argv */
	CLI_INT,        /* int64_t *: decimal in [min, max] */
	CLI_BOOL,       /* bool *: present or not, takes no value */
	CLI_DUR,        /* int64_t *: milliseconds, duration_parse_ms() syntax, in [min, max] */
	CLI_FILE,       /* char **: a text file's contents (no NUL), malloc'd, caller frees; <= max bytes */
	CLI_CHOICE,     /* int *: index of the value in choices[] */
	CLI_ARG,        /* char **: a positional argument, in table order */
	CLI_ARGS,       /* struct cli_strv *: every remaining positional argument (last) */
};

struct cli_strv {
	size_t n;
	char *v[CLI_MAX_REPEAT];
};

/* One entry of a verb's flag table. name is the flag without "--" (or, for
 * CLI_ARG, the placeholder shown in help such as "ID"). */
struct cli_flag {
	const char *name;
	enum cli_flag_type type;
	void *dst;
	const char *meta;                 /* value placeholder in help: "N", "CIDR" */
	const char *help;
	bool required;
	int64_t min, max;                 /* CLI_INT, CLI_DUR range; CLI_FILE max bytes */
	const char *const *choices;       /* CLI_CHOICE, NULL-terminated */
	bool *seen;                       /* if set: true once given */
};

/* The usual --tenant flag, into the char * at ptr. */
#define CLI_FLAG_TENANT(ptr)                                                                 \
	{.name = "tenant", .type = CLI_STR, .dst = (ptr), .meta = "T",                       \
	 .help = "tenant (default: the caller's)"}

struct cli_ctx;
typedef int (*cli_verb_fn)(struct cli_ctx *ctx, int argc, char **argv);

/* Printed-table row callback for a reply in table format. */
typedef void (*cli_show_fn)(const ProtobufCMessage *resp, FILE *out);

/* A flag of a generic verb (resource.c): flag.dst is unused, the value
 * fills the request's field (its proto name): a string, bool, int32 or
 * int64 field as the flag's type says. A CLI_BOOL with on set fills a
 * string field instead: on when given, else off. */
struct cli_field {
	struct cli_flag flag;
	const char *field;
	const char *on, *off;
};

/* One resource's generic verbs, as data (resource.c): its service; the
 * positional ID of its get, delete and other one-id verbs (help name, NULL
 * for "ID"; the request field; the help line) and whether those take
 * --tenant (tenant_id); its List request's flags; the table printers of a
 * List and of a Delete answer (NULL: every field). */
struct cli_resource {
	const ProtobufCServiceDescriptor *svc;
	const char *id, *id_field, *id_help;
	bool tenant;
	const struct cli_field *list;
	size_t n_list;
	cli_show_fn show_list, show_deleted;
};

/* One row of the dispatch table; verb NULL for a noun-only command. */
struct cli_verb {
	const char *noun;
	const char *verb;
	cli_verb_fn fn;
	const char *usage;      /* arguments after "bcctl NOUN VERB" */
	const char *summary;
	const struct cli_resource *res; /* for the generic verbs cli_res_* */
};

struct cli_ctx {
	/* from flags (borrowed from argv) */
	const char *url;
	const char *ca_file;
	bool insecure;
	int format;                       /* enum cli_format */
	int64_t timeout_ms;
	/* global flags, accepted before the noun and after the verb */
	const struct cli_flag *globals;
	size_t n_globals;
	bool globals_seen[CLI_MAX_FLAGS];

	const struct cli_verb *verb;      /* the running verb */
	rpc_client *client;               /* lazily connected, owned */
	char *ca_pem;                     /* owned, lives as long as client */
	char *tunnel_url;                 /* owned: the JSON/HTTP port for exec's WebSocket, or NULL */
	bool rpc_inited;
	bc_error err;
	/* a verb that ran another program (sandbox exec) exits with its
	 * status: set when the verb returns 0 */
	int exit_code;
};

/* main.c */

/* Call svc.method with req, then print the reply: JSON with --format json,
 * else show(resp) or, when show is NULL, the generic field listing.
 * extra_ms is added to the unary timeout (for server-side waits). Returns
 * 0 or -BC_EDOMAIN (ctx->err), -EINVAL for a local configuration error. */
int cli_run(struct cli_ctx *ctx, const ProtobufCServiceDescriptor *svc, const char *method,
	    const ProtobufCMessage *req, cli_show_fn show, int64_t extra_ms);

/* Call svc.method with req and hand the reply over, printing nothing:
 * 0 with *ret (free with protobuf_c_message_free_unpacked), or as
 * cli_run. */
int cli_call(struct cli_ctx *ctx, const ProtobufCServiceDescriptor *svc, const char *method,
	     const ProtobufCMessage *req, int64_t extra_ms, ProtobufCMessage **ret);

/* Open the bidi stream svc.method (no deadline), or NULL with ctx->err. */
rpc_stream *cli_bidi_open(struct cli_ctx *ctx, const ProtobufCServiceDescriptor *svc,
			  const char *method);

/* Open a server stream svc.method with req and print each message as it
 * arrives (JSON with --format json, else show), until the stream ends or
 * max_msgs (> 0) arrived. 0, or -BC_EDOMAIN (ctx->err). No deadline. */
int cli_stream(struct cli_ctx *ctx, const ProtobufCServiceDescriptor *svc, const char *method,
	       const ProtobufCMessage *req, cli_show_fn show, int64_t max_msgs);

/* Print "error: MSG" and the running verb's usage line to stderr; -EINVAL. */
int cli_usage_error(const struct cli_ctx *ctx, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* args.c */

/* Parse argv[0..argc) (the words after the verb) against flags[], then the
 * global flags in ctx. "--name value" and "--name=value"; "--" ends flags.
 * Returns 0, CLI_DONE after printing help for "--help", or -EINVAL after
 * printing a usage error (unknown flag, missing value, bad number, missing
 * required flag or argument, extra argument). */
int cli_args_parse(struct cli_ctx *ctx, const struct cli_flag *flags, size_t n_flags,
		   int argc, char **argv);

/* Parse the global flag at argv[*i] (a word starting with "--"), which may
 * consume argv[*i + 1]. 0 or -EINVAL after printing a usage error. */
int cli_args_global(struct cli_ctx *ctx, int argc, char **argv, int *i);

/* Print the verb's usage line and one line per flag to out. */
void cli_args_help(const struct cli_ctx *ctx, const struct cli_flag *flags, size_t n_flags,
		   FILE *out);

/* One help line per flag. */
void cli_args_print_flags(const struct cli_flag *flags, size_t n_flags, FILE *out);

/* output.c */

/* Print msg as pretty proto3 JSON and a newline. 0 or -ENOMEM. */
int cli_print_json(const ProtobufCMessage *msg, FILE *out);

/* Print every field of msg as "name: value" lines (nested messages as
 * "parent.child", repeated as "name[i]", *_at times as UTC ISO 8601). */
void cli_print_fields(const ProtobufCMessage *msg, FILE *out);

/* Print err as "error: CODE: message" and "  key: value" to err_out, and,
 * if json_out is not NULL, as {"error":{...}} to json_out. */
void cli_print_error(const bc_error *err, FILE *err_out, FILE *json_out);

/* An aligned text table. Cells are added left to right, row by row; empty
 * cells print as "-"; control characters print as '?'. */
struct cli_table;
struct cli_table *cli_table_new(const char *const *headers, size_t n_cols);
void cli_table_cell(struct cli_table *t, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
void cli_table_print(const struct cli_table *t, FILE *out);
void cli_table_free(struct cli_table *t);

/* Epoch milliseconds as "2006-01-02T15:04:05Z" into buf; "-" for 0. */
const char *cli_fmt_time(int64_t ms, char *buf, size_t len);

/* On stderr, the cursor of the next page if a list reply has one. */
void cli_print_more(const char *cursor);

/* resource.c: the generic verbs of the running verb's resource
 * (ctx->verb->res). cli_res_list calls List with the resource's list
 * flags and show_list; cli_res_delete calls Delete with ID (and --tenant)
 * and show_deleted; cli_res_call calls the method named by the verb
 * capitalised ("get": Get, "retire": Retire) with ID (and --tenant), every
 * field printed. Return as cli_run(), or as cli_args_parse(). */
int cli_res_list(struct cli_ctx *ctx, int argc, char **argv);
int cli_res_delete(struct cli_ctx *ctx, int argc, char **argv);
int cli_res_call(struct cli_ctx *ctx, int argc, char **argv);

/* The resources, each in its noun's file. */
extern const struct cli_resource cli_pools, cli_flavors, cli_images, cli_nodes, cli_instances,
	cli_templates, cli_sandboxes, cli_tenants, cli_identities, cli_delegations, cli_tokens,
	cli_policies, cli_secrets, cli_volumes, cli_snapshots;

/* The usual --limit and --cursor flags of a List (cli_field rows). */
#define CLI_FIELD_LIMIT(max_, help_)                                                         \
	{.flag = {.name = "limit", .type = CLI_INT, .meta = "N", .min = 1, .max = (max_),      \
		  .help = (help_)},                                                            \
	 .field = "limit"}
#define CLI_FIELD_CURSOR                                                                     \
	{.flag = {.name = "cursor", .type = CLI_STR, .meta = "C",                              \
		  .help = "continue after this cursor"},                                       \
	 .field = "cursor"}

/* Verbs, one file per noun. */
int cli_pool_create(struct cli_ctx *ctx, int argc, char **argv);

int cli_flavor_create(struct cli_ctx *ctx, int argc, char **argv);

int cli_image_create(struct cli_ctx *ctx, int argc, char **argv);

int cli_node_join_token(struct cli_ctx *ctx, int argc, char **argv);
int cli_node_set_capacity(struct cli_ctx *ctx, int argc, char **argv);
int cli_doctor_run(struct cli_ctx *ctx, int argc, char **argv);

/* sandbox.c */
/* secret.c */
int cli_secret_put(struct cli_ctx *ctx, int argc, char **argv);
int cli_secret_delete(struct cli_ctx *ctx, int argc, char **argv);
int cli_template_create(struct cli_ctx *ctx, int argc, char **argv);
int cli_template_update(struct cli_ctx *ctx, int argc, char **argv);
int cli_sandbox_create(struct cli_ctx *ctx, int argc, char **argv);
int cli_sandbox_extend(struct cli_ctx *ctx, int argc, char **argv);
/* snapshot.c */
int cli_sandbox_snapshot(struct cli_ctx *ctx, int argc, char **argv);

/* volume.c */
int cli_volume_create(struct cli_ctx *ctx, int argc, char **argv);
int cli_volume_get(struct cli_ctx *ctx, int argc, char **argv);
int cli_volume_resize(struct cli_ctx *ctx, int argc, char **argv);
int cli_volume_delete(struct cli_ctx *ctx, int argc, char **argv);
#define CLI_VOLUMES_MAX 16
struct Bc__Compute__V1__TemplateVolume;
int cli_volumes_parse(struct cli_ctx *ctx, char *list,
		      struct Bc__Compute__V1__TemplateVolume *v,
		      struct Bc__Compute__V1__TemplateVolume **vp, size_t *ret_n);
/* sandbox_exec.c */
int cli_sandbox_exec(struct cli_ctx *ctx, int argc, char **argv);
int cli_sandbox_cp(struct cli_ctx *ctx, int argc, char **argv);
int cli_sandbox_tunnels(struct cli_ctx *ctx, int argc, char **argv);
int cli_sandbox_close_tunnels(struct cli_ctx *ctx, int argc, char **argv);

/* How bcctl mcp reaches a sandbox's sshd: the key (NULL: ~/.ssh/id_ed25519),
 * the ssh program (NULL: ssh), trusting an uncertified host key. */
struct cli_exec_opts {
	const char *key, *prog;
	bool accept_host_key;
};

/* Run q->command in sandbox q->sandbox_id as `sandbox exec` would, with
 * q->in on its stdin and its output captured into *ret (see mcp.h). 0,
 * or -BC_EDOMAIN with ctx->err. */
int cli_sandbox_run(struct cli_ctx *ctx, const struct cli_exec_opts *o,
		    const struct mcp_exec_req *q, struct mcp_exec_out *ret);

/* sandbox_run.c: ssh's three standard streams as pipes, pumped by one
 * thread (stdin fed from in, stdout and stderr kept up to cap each) until
 * both outputs end; past deadline ssh gets SIGTERM (out->timed_out). */
struct cli_capture {
	const uint8_t *in;
	size_t in_len, in_off, cap;
	int64_t deadline;          /* deadline_in() */
	struct mcp_exec_out *out;
	int fd[3], child[3];       /* ours; the child's ends (closed once spawned) */
	pid_t pid;
	pthread_t thread;
	bool running;
};
/* The pipes and fa's dup2 actions (fa initialised here; destroy it). */
int cli_capture_actions(struct cli_capture *c, posix_spawn_file_actions_t *fa);
/* Close the child's ends and start the pump for pid. */
int cli_capture_start(struct cli_capture *c, pid_t pid);
/* Wait for the pump and close every pipe. */
void cli_capture_finish(struct cli_capture *c);
int cli_instance_create(struct cli_ctx *ctx, int argc, char **argv);

int cli_tenant_create(struct cli_ctx *ctx, int argc, char **argv);
int cli_tenant_set_state(struct cli_ctx *ctx, int argc, char **argv);
int cli_tenant_quota(struct cli_ctx *ctx, int argc, char **argv);
int cli_tenant_offer(struct cli_ctx *ctx, int argc, char **argv);
int cli_pool_budget_check(struct cli_ctx *ctx, int argc, char **argv);

int cli_identity_create(struct cli_ctx *ctx, int argc, char **argv);
int cli_identity_set_state(struct cli_ctx *ctx, int argc, char **argv);
int cli_identity_recognize(struct cli_ctx *ctx, int argc, char **argv);
int cli_delegation_create(struct cli_ctx *ctx, int argc, char **argv);

int cli_events_list(struct cli_ctx *ctx, int argc, char **argv);
/* usage.c */
int cli_usage_list(struct cli_ctx *ctx, int argc, char **argv);
int cli_events_watch(struct cli_ctx *ctx, int argc, char **argv);

/* mcp.c */
int cli_mcp(struct cli_ctx *ctx, int argc, char **argv);

int cli_token_create(struct cli_ctx *ctx, int argc, char **argv);

int cli_policy_create(struct cli_ctx *ctx, int argc, char **argv);
int cli_policy_attach(struct cli_ctx *ctx, int argc, char **argv);
int cli_policy_detach(struct cli_ctx *ctx, int argc, char **argv);

#endif
