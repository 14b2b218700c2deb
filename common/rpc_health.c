/* rpc_health.c: the standard grpc.health.v1.Health service every server
 * carries. Check answers SERVING for "" and for each registered service
 * (NOT_SERVING once shutdown began) and NOT_FOUND for other names, as the
 * protocol says; Watch sends the current status once, then holds the
 * stream until the client cancels or the server stops. */
#include "rpc_internal.h"

#include "grpc/health/v1/health.pb-c.h"

typedef Grpc__Health__V1__HealthCheckRequest HealthReq;
typedef Grpc__Health__V1__HealthCheckResponse HealthResp;

#define WATCH_POLL_MS 1000

static HealthResp *status_new(rpc_call *call, const char *service)
{
	HealthResp *resp = rpc_new(call, &grpc__health__v1__health_check_response__descriptor);

	if (!rpc_server_has_service(call->srv, service))
		resp->status = GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVICE_UNKNOWN;
	else if (rpc_server_stopping(call->srv))
		resp->status = GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__NOT_SERVING;
	else
		resp->status = GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING;
	return resp;
}

static int health_check(rpc_call *call, const ProtobufCMessage *msg,
			ProtobufCMessage **ret_resp, bc_error *err)
{
	const HealthReq *req = (const HealthReq *)msg;
	HealthResp *resp = status_new(call, req->service);

	if (resp->status == GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVICE_UNKNOWN)
		return bc_error_set(err, BC_NOT_FOUND, "unknown service");
	*ret_resp = &resp->base;
	return 0;
}

static int health_watch(rpc_call *call, const ProtobufCMessage *msg, bc_error *err)
{
	const HealthReq *req = (const HealthReq *)msg;

	if (rpc_call_send(call, &status_new(call, req->service)->base) < 0)
		return 0;
	while (!rpc_call_wait_cancelled(call, WATCH_POLL_MS))
		;
	return 0;
}

static const struct rpc_handler health_handlers[] = {
	{.method = "Check", .kind = RPC_UNARY, .fn.unary = health_check},
	{.method = "Watch", .kind = RPC_SERVER_STREAM, .fn.sstream = health_watch},
};

/* See rpc_internal.h. */
int rpc_health_register(rpc_server *s)
{
	return rpc_server_add_service(s, &grpc__health__v1__health__descriptor, health_handlers,
				      sizeof(health_handlers) / sizeof(health_handlers[0]));
}
