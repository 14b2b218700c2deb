/* fuzz_ws: the WebSocket frame header parser of the JSON/HTTP transport
 * (rpc_ws_frame_parse), which reads bytes from anyone holding an upgraded
 * connection, and the header list matcher the handshake uses. Frames are
 * taken one after another as the transport does: a header is accepted
 * only inside the input, with a known opcode and a sane length, or
 * refused with 1002/1003 and a reason. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "rpc_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	size_t off = 0;
	char *s;

	while (off < size) {
		struct rpc_ws_frame f;
		const char *why = NULL;
		int r = rpc_ws_frame_parse(data + off, size - off, &f, &why);

		if (r < 0) {
			if ((r != -1002 && r != -1003) || !why)
				abort();
			break;
		}
		if (r == 0)
			break;
		if ((size_t)r != f.head_len || f.head_len > size - off || f.head_len < 6 ||
		    f.head_len > 14 || f.len >> 63)
			abort();
		if (f.op != RPC_WS_CONT && f.op != RPC_WS_BINARY && f.op != RPC_WS_CLOSE &&
		    f.op != RPC_WS_PING && f.op != RPC_WS_PONG)
			abort();
		if ((f.op & 0x8) && (f.len > 125 || !f.fin))
			abort();
		if (f.len > size - off - f.head_len)
			break;
		off += f.head_len + (size_t)f.len;
	}
	s = malloc(size + 1);
	memcpy(s, data, size);
	s[size] = '\0';
	(void)rpc_http_list_has(s, "upgrade");
	(void)rpc_http_list_has(s, "websocket");
	free(s);
	return 0;
}
