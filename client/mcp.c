/*
 * The MCP server's protocol side: lines of JSON-RPC 2.0 from standard input,
 * one reply line per request on standard output, in order.
 *
 * - Lines are read with a bound (MCP_MAX_LINE): a longer line is skipped to
 *   its end without being kept, and answered with a parse error.
 * - Malformed JSON (jansson also refuses invalid UTF-8 and nesting deeper
 *   than its limit) gets a parse error with a null id; the server goes on.
 * - Batches (JSON arrays) are refused: revision 2025-06-18 removed them.
 * - Notifications (no id) get no reply; requests other than initialize and
 *   ping before initialize are refused.
 * - End of input ends the server with status 0. Input is read ahead between
 *   requests, so the end is seen while requests are still queued: those are
 *   answered for MCP_EOF_GRACE_MS more, then the server exits without them.
 *   A client closes stdin to shut the server down (the MCP stdio transport)
 *   and sends SIGTERM 2 s later; a script that pipes requests in still gets
 *   its answers.
 */
#include "client/mcp.h"
#include "client/mcp-input.h"

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdio_ext.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* How long requests read before the end of input are still answered after it. */
#define MCP_EOF_GRACE_MS 500

/* Newest first; the first is what a client with an unknown revision is offered. */
static const char *const versions[] = {"2025-06-18", "2025-03-26", "2024-11-05"};

static int send_json(json_t *msg)
{
    int r = json_dumpf(msg, stdout, JSON_COMPACT);
    json_decref(msg);
    if (r < 0 || fputc('\n', stdout) == EOF || fflush(stdout) != 0)
        return -EIO;
    return 0;
}

static int reply_result(json_t *id, json_t *result)
{
    json_t *msg = json_pack("{s:s, s:O, s:o}", "jsonrpc", "2.0", "id", id, "result", result);
    return msg ? send_json(msg) : -ENOMEM;
}

static int reply_error(json_t *id, int code, const char *message)
{
    json_t *msg = json_pack("{s:s, s:O, s:{s:i, s:s}}", "jsonrpc", "2.0", "id",
                            id ? id : json_null(), "error", "code", code, "message", message);
    return msg ? send_json(msg) : -ENOMEM;
}

json_t *mcp_tool_result(json_t *structured)
{
    char *text;
    json_t *r;

    if (!structured)
        return mcp_tool_error("out of memory");
    text = json_dumps(structured, JSON_COMPACT);
    r = json_pack("{s:[{s:s, s:s}], s:o, s:b}", "content", "type", "text", "text", text ? text : "",
                  "structuredContent", structured, "isError", 0);
    free(text);
    return r;
}

json_t *mcp_tool_error(const char *fmt, ...)
{
    char buf[1024];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    return json_pack("{s:[{s:s, s:s}], s:b}", "content", "type", "text", "text", buf, "isError", 1);
}

static json_t *initialize(struct mcp *m, json_t *params)
{
    const char *want = json_string_value(json_object_get(params, "protocolVersion"));
    const char *chosen = versions[0];

    for (size_t i = 0; want && i < sizeof(versions) / sizeof(versions[0]); i++) {
        if (strcmp(want, versions[i]) == 0)
            chosen = versions[i];
    }
    snprintf(m->version, sizeof(m->version), "%s", chosen);
    m->initialized = true;
    return json_pack("{s:s, s:{s:{s:b}, s:{s:b, s:b}}, s:{s:s, s:s}, s:s}", "protocolVersion",
                     chosen, "capabilities", "tools", "listChanged", 0, "resources", "subscribe", 0,
                     "listChanged", 0, "serverInfo", "name", "cairn", "version", CAIRN_VERSION,
                     "instructions",
                     "cairn stores documents by the SHA-256 of their content. Add text or files, "
                     "then find them with search (words, \"phrases\", OR, -word, prefix*, "
                     "name:word, tag:value) and read them with get, by hash, hash prefix or name.");
}

/* One request or notification. Returns 0, or -EIO when standard output is gone. */
static int handle(struct mcp *m, json_t *msg)
{
    json_t *id = json_object_get(msg, "id"), *params = json_object_get(msg, "params"), *result;
    const char *method = json_string_value(json_object_get(msg, "method"));
    const char *emsg = NULL;
    int code = 0;

    const char *jsonrpc = json_string_value(json_object_get(msg, "jsonrpc"));

    if (!json_is_object(msg) || !method || !jsonrpc || strcmp(jsonrpc, "2.0") != 0 ||
        (id && !json_is_string(id) && !json_is_integer(id)))
        return reply_error(id && (json_is_string(id) || json_is_integer(id)) ? id : NULL,
                           MCP_INVALID_REQUEST, "not a JSON-RPC 2.0 request");
    if (params && !json_is_object(params))
        return id ? reply_error(id, MCP_INVALID_PARAMS, "params must be an object") : 0;
    if (!id)
        return 0; /* notifications: initialized, cancelled, ... need no answer */
    if (strcmp(method, "initialize") == 0)
        return reply_result(id, initialize(m, params));
    if (strcmp(method, "ping") == 0)
        return reply_result(id, json_object());
    if (!m->initialized)
        return reply_error(id, MCP_INVALID_REQUEST, "initialize first");
    if (strcmp(method, "tools/list") == 0) {
        result = json_pack("{s:o}", "tools", mcp_tools_list());
    } else if (strcmp(method, "tools/call") == 0) {
        const char *name = json_string_value(json_object_get(params, "name"));
        json_t *args = json_object_get(params, "arguments");
        if (!name) {
            code = MCP_INVALID_PARAMS;
            emsg = "tools/call needs a tool name";
            result = NULL;
        } else {
            result = mcp_tools_call(m, name, args, &code, &emsg);
        }
    } else if (strcmp(method, "resources/list") == 0) {
        result = mcp_resources_list(m, params, &code, &emsg);
    } else if (strcmp(method, "resources/templates/list") == 0) {
        result = json_pack("{s:o}", "resourceTemplates", mcp_resource_templates());
    } else if (strcmp(method, "resources/read") == 0) {
        result = mcp_resources_read(m, params, &code, &emsg);
    } else {
        return reply_error(id, MCP_METHOD_NOT_FOUND, "unknown method");
    }
    if (!result)
        return reply_error(id, code ? code : MCP_INTERNAL_ERROR, emsg ? emsg : "out of memory");
    return reply_result(id, result);
}

static void mcp_free_allow(struct mcp *m)
{
    for (size_t i = 0; i < m->n_allow; i++)
        free(m->allow[i]);
    m->n_allow = 0;
}

/*
 * A request may carry a document of megabytes as one string, but not
 * millions of values: jansson keeps each in an allocation of its own, and
 * one line of 15 MiB of "[1,1,..." took 1.2 GB. The values (the commas,
 * colons and brackets outside strings) are counted before parsing.
 */
#define MCP_MAX_VALUES 65536

static bool too_many_values(const char *line, size_t len)
{
    size_t values = 0;
    bool in_string = false;

    for (size_t i = 0; i < len; i++) {
        char ch = line[i];
        if (in_string) {
            if (ch == '\\')
                i++;
            else if (ch == '"')
                in_string = false;
        } else if (ch == '"') {
            in_string = true;
        } else if ((ch == ',' || ch == ':' || ch == '[' || ch == '{') &&
                   ++values > MCP_MAX_VALUES) {
            return true;
        }
    }
    return false;
}

int cli_cmd_mcp(struct cli *cli, int argc, char **argv)
{
    struct mcp m = {.cli = cli};
    struct mcp_input in;
    char *line;
    size_t len;
    int r = 0, got;

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            cli_print_command_help(stdout, argv[0]);
            mcp_free_allow(&m);
            return CLI_EXIT_OK;
        }
        if (strcmp(argv[i], "--allow-path") != 0 || i + 1 == argc) {
            mcp_free_allow(&m);
            return cli_usage_error("mcp: takes only --allow-path DIR (any number of times)");
        }
        if (m.n_allow == MCP_MAX_ALLOW) {
            mcp_free_allow(&m);
            return cli_usage_error("mcp: at most %d --allow-path", MCP_MAX_ALLOW);
        }
        /* Resolved once: a path add is given is resolved too, then compared. */
        if (!(m.allow[m.n_allow] = realpath(argv[++i], NULL))) {
            int e = errno;
            mcp_free_allow(&m);
            errno = e;
            return cli_fail_errno(argv[i]);
        }
        m.n_allow++;
    }
    /* The protocol owns standard output: nothing else may go there. */
    cli->json = true;
    /* A client that goes away mid-reply ends the server through EPIPE, not a signal. */
    signal(SIGPIPE, SIG_IGN);
    mcp_input_init(&in, STDIN_FILENO);
    while (r == 0 && (got = mcp_input_line(&in, &line, &len)) != 0) {
        json_error_t err;
        json_t *msg;

        if (mcp_input_ended_ms(&in) > MCP_EOF_GRACE_MS)
            break;
        if (got == 2) {
            r = reply_error(NULL, MCP_PARSE_ERROR, "request line too long");
        } else if (len == 0 || strspn(line, " \t\r") == len) {
            /* blank lines are skipped */
        } else if (too_many_values(line, len)) {
            r = reply_error(NULL, MCP_INVALID_REQUEST,
                            "request has too many values (at most 65536)");
        } else if (!(msg = json_loadb(line, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &err))) {
            r = reply_error(NULL, MCP_PARSE_ERROR, "parse error");
        } else {
            if (json_is_array(msg))
                r = reply_error(NULL, MCP_INVALID_REQUEST, "batches are not supported");
            else
                r = handle(&m, msg);
            json_decref(msg);
        }
        mcp_input_readahead(&in);
    }
    mcp_input_free(&in);
    mcp_free_allow(&m);
    if (r == -EIO) {
        /* Output that cannot be written means the client is gone: the end of the session,
         * with nothing left to flush at exit. */
        __fpurge(stdout);
        return CLI_EXIT_OK;
    }
    return r == 0 ? CLI_EXIT_OK : CLI_EXIT_FAILED;
}
