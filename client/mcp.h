#pragma once

/*
 * `cairn mcp`: a Model Context Protocol server on standard input and output
 * (newline-delimited JSON-RPC 2.0), a thin layer over the client library
 * with one daemon connection (mcp.c: the protocol; mcp-tools.c: the tools
 * and resources).
 */

#include <jansson.h>

#include "client/cli.h"

/* Longest request line; a longer one is refused (and skipped) without being held in memory. */
#define MCP_MAX_LINE (16u * 1024 * 1024)
/* Most bytes of a document one get or resource read returns. */
#define MCP_MAX_READ (1024u * 1024)

/* Directories `add {path}` may read below (--allow-path); none: it reads no file at all. */
#define MCP_MAX_ALLOW 16

struct mcp {
    struct cli *cli;
    bool initialized;
    char version[32];           /* the negotiated protocol revision */
    char *allow[MCP_MAX_ALLOW]; /* real paths, without a trailing '/' ("/" stays "/") */
    size_t n_allow;
};

/* A tool result: `structured` (taken) as structuredContent and as JSON text. */
json_t *mcp_tool_result(json_t *structured);
/* A tool failure: a result with isError and the reason as text. */
json_t *mcp_tool_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* tools/list's array (new reference). */
json_t *mcp_tools_list(void);
/*
 * tools/call: the result (new reference), or NULL with *code and *msg set
 * for a JSON-RPC error (unknown tool, arguments not an object).
 */
json_t *mcp_tools_call(struct mcp *m, const char *name, json_t *args, int *code, const char **msg);
/* resources/list, resources/templates/list and resources/read; NULL with code and msg set on error.
 */
json_t *mcp_resources_list(struct mcp *m, json_t *params, int *code, const char **msg);
json_t *mcp_resource_templates(void);
json_t *mcp_resources_read(struct mcp *m, json_t *params, int *code, const char **msg);

/* JSON-RPC error codes. */
enum {
    MCP_PARSE_ERROR = -32700,
    MCP_INVALID_REQUEST = -32600,
    MCP_METHOD_NOT_FOUND = -32601,
    MCP_INVALID_PARAMS = -32602,
    MCP_INTERNAL_ERROR = -32603,
    MCP_RESOURCE_NOT_FOUND = -32002,
};
