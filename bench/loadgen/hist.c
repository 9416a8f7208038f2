/* Latency histograms and the names of ops, profiles and error kinds. */

#include "bench/loadgen/loadgen.h"

#include <string.h>

static unsigned bucket_of(uint64_t ns)
{
    unsigned exp, idx;

    if (ns < 2 * LG_HIST_SUB)
        return (unsigned)ns;
    exp = 63u - (unsigned)__builtin_clzll(ns); /* >= 7 */
    /* ns >> (exp - 6) is in [64, 128): its low six bits pick the sub-bucket. */
    idx = (exp - 6) * LG_HIST_SUB + (unsigned)(ns >> (exp - 6));
    return idx < LG_HIST_BUCKETS ? idx : LG_HIST_BUCKETS - 1;
}

/* The smallest value that falls in bucket `idx`. */
static uint64_t bucket_low(unsigned idx)
{
    unsigned exp;

    if (idx < 2 * LG_HIST_SUB)
        return idx;
    exp = idx / LG_HIST_SUB + 5;
    return (uint64_t)(LG_HIST_SUB + idx % LG_HIST_SUB) << (exp - 6);
}

void lg_hist_record(struct lg_hist *h, uint64_t ns)
{
    if (h->count == 0 || ns < h->min)
        h->min = ns;
    if (ns > h->max)
        h->max = ns;
    h->count++;
    h->sum += (double)ns;
    h->buckets[bucket_of(ns)]++;
}

uint64_t lg_hist_quantile(const struct lg_hist *h, double q)
{
    uint64_t rank, seen = 0;

    if (h->count == 0)
        return 0;
    /* The nearest-rank definition: the smallest value with at least q of the samples at or below
     * it. */
    rank = (uint64_t)(q * (double)h->count + 0.999999);
    if (rank < 1)
        rank = 1;
    for (unsigned i = 0; i < LG_HIST_BUCKETS; i++) {
        seen += h->buckets[i];
        if (seen >= rank) {
            /* Report the middle of the bucket, clamped to what was really seen. */
            uint64_t low = bucket_low(i);
            uint64_t high = i + 1 < LG_HIST_BUCKETS ? bucket_low(i + 1) : h->max + 1;
            uint64_t mid = low + (high - low) / 2;
            if (mid < h->min)
                mid = h->min;
            if (mid > h->max)
                mid = h->max;
            return mid;
        }
    }
    return h->max;
}

void lg_hist_merge(struct lg_hist *into, const struct lg_hist *from)
{
    if (from->count == 0)
        return;
    if (into->count == 0 || from->min < into->min)
        into->min = from->min;
    if (from->max > into->max)
        into->max = from->max;
    into->count += from->count;
    into->sum += from->sum;
    for (unsigned i = 0; i < LG_HIST_BUCKETS; i++)
        into->buckets[i] += from->buckets[i];
}

static const char *const op_names[LG_OP_COUNT_] = {
    [LG_OP_GET] = "get",       [LG_OP_SEARCH] = "search",   [LG_OP_ADD] = "add",
    [LG_OP_DELETE] = "delete", [LG_OP_CONNECT] = "connect",
};

static const char *const profile_names[LG_PROFILE_COUNT_] = {
    [LG_PROFILE_MIXED] = "mixed",   [LG_PROFILE_CHURN] = "external_agent_churn",
    [LG_PROFILE_GET] = "get",       [LG_PROFILE_ADD] = "add",
    [LG_PROFILE_SEARCH] = "search",
};

const char *lg_op_name(enum lg_op op)
{
    return op_names[op];
}

const char *lg_profile_name(enum lg_profile p)
{
    return profile_names[p];
}

int lg_profile_parse(const char *s, enum lg_profile *out)
{
    for (unsigned i = 0; i < LG_PROFILE_COUNT_; i++) {
        if (strcmp(s, profile_names[i]) == 0) {
            *out = (enum lg_profile)i;
            return 0;
        }
    }
    return -1;
}

const char *lg_transport_name(enum lg_transport t)
{
    return t == LG_TRANSPORT_MCP ? "mcp" : "ipc";
}

const char *lg_error_name(unsigned code)
{
    switch (code) {
    case LG_ERR_DISCONNECTED:
        return "disconnected";
    case LG_ERR_CONNECT:
        return "connect_failed";
    case LG_ERR_BAD_REPLY:
        return "bad_reply";
    case LG_ERR_LOCAL:
        return "loadgen_error";
    case LG_ERR_TOOL:
        return "tool_error";
    case LG_ERR_RPC:
        return "rpc_error";
    default:
        return proto_error_name((enum proto_error)code);
    }
}
