#pragma once

/*
 * cairn-loadgen: a closed-loop load generator for cairnd. One process, one
 * libuv loop, N logical clients; each keeps up to `pipeline` requests in
 * flight on its own connection and sends the next request the moment one
 * finishes. The workload (which op next, what content, which query) lives in
 * workload.c, the clients and their daemon connections in session.c, the
 * MCP transport (one `cairn mcp` process per client) in mcp.c, latency
 * histograms in hist.c and the text and JSON reports in report.c. Request
 * frames and reply splitting come from the client library's codec, the same
 * wire code as `cairn`'s.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "client/client.h"
#include "proto/proto.h"

/* The request kinds measured, plus the connect of a short-lived session. */
enum lg_op { LG_OP_GET, LG_OP_SEARCH, LG_OP_ADD, LG_OP_DELETE, LG_OP_CONNECT, LG_OP_COUNT_ };

enum lg_profile {
    LG_PROFILE_MIXED,
    LG_PROFILE_CHURN,
    LG_PROFILE_GET,
    LG_PROFILE_ADD,
    LG_PROFILE_SEARCH,
    LG_PROFILE_COUNT_
};

/* How the measured requests reach cairnd (seeding always uses ipc). */
enum lg_transport {
    LG_TRANSPORT_IPC, /* the daemon's socket, msgpack frames */
    LG_TRANSPORT_MCP, /* tools/call to a `cairn mcp` process per client */
};

enum lg_content {
    LG_CONTENT_TEXT,   /* words: compressible, searchable */
    LG_CONTENT_RANDOM, /* incompressible bytes */
};

/* Failures that are not daemon error codes, counted after the PROTO_E_* ones. */
enum {
    LG_ERR_DISCONNECTED = PROTO_E_COUNT_, /* the connection ended with the request open */
    LG_ERR_CONNECT,                       /* the connection could not be made */
    LG_ERR_BAD_REPLY,                     /* a reply that breaks the protocol */
    LG_ERR_LOCAL,                         /* the load generator itself failed (memory) */
    LG_ERR_TOOL, /* mcp: a tool result with isError and no daemon error code in its text */
    LG_ERR_RPC,  /* mcp: a JSON-RPC error answered the request */
    LG_ERR_COUNT_
};

/* Bounds checked by the command line parser. */
#define LG_MAX_CLIENTS 10000
#define LG_MAX_PIPELINE 64 /* the daemon reads no further than 64 requests in flight */
#define LG_MAX_FILE_SIZE ((size_t)64 * 1024 * 1024)
#define LG_MAX_FILES 10000000u
/* mcp: a get returns at most 1 MiB (MCP_MAX_READ), so documents are no larger. */
#define LG_MCP_MAX_FILE_SIZE ((size_t)1024 * 1024)

struct lg_config {
    char socket[108];
    unsigned clients;
    uint64_t ops_per_client; /* 0: until the duration ends */
    enum lg_profile profile;
    unsigned files;
    size_t file_size;
    unsigned pipeline;
    double duration; /* seconds; 0: until every client did its ops */
    const char *json_path;
    enum lg_content content;
    unsigned session_ops; /* external_agent_churn: requests per connection */
    uint64_t seed;
    bool quiet;
    enum lg_transport transport;
    const char *cairn; /* mcp: the cairn binary, a path or a name looked up in PATH */
};

/* --- latency histograms (hist.c) --- */

/*
 * Log-linear buckets over nanoseconds: exact below 128 ns, then 64 buckets per
 * power of two (under 1.6% error) up to about 18 minutes. Fixed size, so a
 * run of any length costs the same memory.
 */
#define LG_HIST_SUB 64
#define LG_HIST_BUCKETS (2 * LG_HIST_SUB + 34 * LG_HIST_SUB)

struct lg_hist {
    uint64_t count;
    uint64_t min, max;
    double sum;
    uint64_t buckets[LG_HIST_BUCKETS];
};

void lg_hist_record(struct lg_hist *h, uint64_t ns);
/* Adds every value of `from` to `into`. */
void lg_hist_merge(struct lg_hist *into, const struct lg_hist *from);
/* The value at quantile q (0..1), in nanoseconds; 0 for an empty histogram. */
uint64_t lg_hist_quantile(const struct lg_hist *h, double q);

/* What one op type did. */
struct lg_op_stats {
    uint64_t count; /* finished, ok or not */
    uint64_t failures;
    uint64_t errors[LG_ERR_COUNT_];
    uint64_t search_hits;   /* search: hits returned by successful searches */
    struct lg_hist latency; /* every finished op, failed ones too */
};

const char *lg_op_name(enum lg_op op);
const char *lg_profile_name(enum lg_profile p);
int lg_profile_parse(const char *s, enum lg_profile *out);
const char *lg_error_name(unsigned code);
const char *lg_transport_name(enum lg_transport t);

/* --- the workload (workload.c) --- */

struct lg_workload;

/* Everything a request needs to be encoded; `ref` points into the workload or the client. */
struct lg_request {
    enum lg_op op;
    const char *ref; /* get, delete */
    struct client_search_req search;
    uint64_t unique; /* add: makes the content unique */
};

int lg_workload_new(struct lg_workload **out, const struct lg_config *cfg);
struct lg_workload *lg_workload_free(struct lg_workload *wl);
/* The share of each op type in the profile, for the report. */
void lg_workload_mix(enum lg_profile p, double mix[LG_OP_COUNT_]);
/* Appends the frames of `req` to `sbuf`; `seed` marks a seeding add. 0 or negative errno. */
int lg_workload_encode(struct lg_workload *wl, msgpack_sbuffer *sbuf, uint64_t id,
                       const struct lg_request *req, bool seed);
/*
 * The document of add number `unique` (or seeding document `unique`) and its
 * name; both stay valid until the next call into the workload.
 */
const uint8_t *lg_workload_document(struct lg_workload *wl, uint64_t unique, bool seed,
                                    const char **name, size_t *len);
/* Seeded documents, whose hashes the gets use. */
void lg_workload_set_seeded(struct lg_workload *wl, unsigned index, const char *hash);
unsigned lg_workload_seeded(const struct lg_workload *wl);
const char *lg_workload_seeded_hash(const struct lg_workload *wl, uint64_t *rng);
/* A search query built from the workload's vocabulary. */
void lg_workload_query(struct lg_workload *wl, uint64_t *rng, struct client_search_req *out);

static inline uint64_t lg_rand(uint64_t *state)
{
    /* splitmix64: fast, and good enough to pick ops and documents. */
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* --- the run (session.c) --- */

enum lg_phase {
    LG_PHASE_SEED, /* adding the documents the measured phase reads */
    LG_PHASE_MEASURE,
};

struct lg_run {
    uv_loop_t loop;
    const struct lg_config *cfg;
    struct lg_workload *wl;
    enum lg_phase phase;
    struct lg_op_stats stats[LG_OP_COUNT_];
    uint64_t start_ns, end_ns;
    uint64_t next_unique;
    unsigned running_clients;
    bool deadline_passed;
    uv_timer_t deadline;
    struct lg_client *clients;
    unsigned nclients;
    int fatal; /* negative errno of a failure that stopped the run */
};

/*
 * Runs one phase to its end: `nclients` clients, each doing `quota` requests
 * (or until cfg->duration when quota is 0). Returns 0, or negative errno when
 * the phase could not run at all.
 */
int lg_run_phase(struct lg_run *run, enum lg_phase phase, unsigned nclients, uint64_t quota,
                 unsigned pipeline);

/*
 * A client: one closed loop on one transport session at a time (a daemon
 * connection, or a `cairn mcp` process in the measured phase of an mcp run).
 * session.c owns the loop; a transport reports back through lg_client_*.
 */
struct lg_client {
    struct lg_run *run;
    unsigned index;
    uint64_t rng;
    uint64_t quota, issued;
    unsigned pipeline;
    struct lg_conn *conn; /* ipc session */
    struct lg_mcp *mcp;   /* mcp session */
    bool reconnect;       /* a session before this one was lost */
    uv_timer_t retry;     /* waits a little before connecting again after a failed connect */
    bool finished;
    /* Documents this client added and may delete (mixed and churn profiles). */
    char (*pool)[PROTO_HASH_HEX + 1];
    size_t npool, cappool;
    /* Seeding: the next document index this client adds. */
    unsigned seed_next;
};

static inline bool lg_measuring(const struct lg_run *run)
{
    return run->phase == LG_PHASE_MEASURE;
}

static inline bool lg_churn(const struct lg_run *run)
{
    return lg_measuring(run) && run->cfg->profile == LG_PROFILE_CHURN;
}

/* Counts a finished op in the measured phase's statistics (error 0: it succeeded). */
void lg_record(struct lg_run *run, enum lg_op op, uint64_t start_ns, unsigned error);
/* Whether the client may send another request (quota, deadline, no fatal error). */
bool lg_client_may_issue(const struct lg_client *c);
/* The client's next request of its profile; a delete takes its document from the pool. */
void lg_client_pick(struct lg_client *c, struct lg_request *req);
/* Remembers a document the client added, for its deletes. */
void lg_client_remember(struct lg_client *c, const char *hash, size_t len);
/* The requests one session may send: cfg->session_ops under churn, else unbounded. */
unsigned lg_client_session_ops(const struct lg_client *c);
/*
 * The session is up (connected, or handshake done), begun at connect_ns.
 * Returns true when the clock runs and the transport should send now; false
 * while the phase waits for the other clients.
 */
bool lg_client_connected(struct lg_client *c, uint64_t connect_ns);
/* The session could not be set up; the transport has let go of it. */
void lg_client_connect_failed(struct lg_client *c, uint64_t connect_ns, int status);
/* The session ended (error 0: as planned); the transport has let go of it. */
void lg_client_session_ended(struct lg_client *c, unsigned error);

/* --- the mcp transport (mcp.c) --- */

/* Spawns the client's `cairn mcp` and starts its handshake; sets c->mcp. */
void lg_mcp_open(struct lg_client *c);
/* Whether the handshake is done (the session can send requests). */
bool lg_mcp_ready(const struct lg_mcp *m);
/* Sends requests until the pipeline is full, or ends the session when it has no more to do. */
void lg_mcp_fill(struct lg_mcp *m);
/* Checks up front that `cairn` can be executed: 0, or negative errno. */
int lg_mcp_check_binary(const char *cairn);

/* --- reports (report.c) --- */

struct lg_seed_report {
    unsigned documents;
    double seconds;
    uint64_t failures;
};

void lg_report_text(const struct lg_run *run, const struct lg_seed_report *seed);
int lg_report_json(const struct lg_run *run, const struct lg_seed_report *seed, const char *path);
