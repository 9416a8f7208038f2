/*
 * What the load generator sends: the op mix of each profile, document
 * content, and search queries.
 *
 * Text content is made of pseudo-words ("kalomi", "trusa", ...) from a fixed
 * vocabulary of 4,096, drawn with a Zipf distribution like the words of real
 * prose, so it compresses about as well as text does and a query for a rare
 * word matches few documents while a common one matches many. Every added
 * document starts with a line that makes it unique, so adds store new content
 * instead of deduplicating. Random content is incompressible bytes.
 */

#include "bench/loadgen/loadgen.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define VOCAB_SIZE 4096
#define WORD_MAX 8
/* Content is cut from a pool this much larger than one document, at a random offset. */
#define POOL_EXTRA ((size_t)1024 * 1024)

static const char syllables[32][3] = {
    "ka", "lo", "mi", "nu", "re", "sa", "ti", "vo", "ba", "de", "fi", "go", "hu", "ja", "ke", "li",
    "mo", "ne", "pa", "qu", "ri", "so", "tu", "va", "we", "xi", "yo", "za", "ch", "st", "tr", "pl",
};

struct lg_workload {
    const struct lg_config *cfg;
    uint64_t nonce;
    char vocab[VOCAB_SIZE][WORD_MAX + 1];
    double zipf_cdf[VOCAB_SIZE];
    uint8_t *pool;
    size_t pool_len;
    uint8_t *doc; /* one document being encoded */
    char (*seeded)[PROTO_HASH_HEX + 1];
    unsigned nseeded;
    char query_buf[2 * WORD_MAX + 2];
    char name_buf[64];
};

/* The profiles' op mixes, in shares of requests (the connect of a session is extra). */
static const double mixes[LG_PROFILE_COUNT_][LG_OP_COUNT_] = {
    [LG_PROFILE_MIXED] =
        {[LG_OP_GET] = 0.50, [LG_OP_SEARCH] = 0.25, [LG_OP_ADD] = 0.15, [LG_OP_DELETE] = 0.10},
    [LG_PROFILE_CHURN] =
        {[LG_OP_GET] = 0.50, [LG_OP_SEARCH] = 0.25, [LG_OP_ADD] = 0.15, [LG_OP_DELETE] = 0.10},
    [LG_PROFILE_GET] = {[LG_OP_GET] = 1.0},
    [LG_PROFILE_ADD] = {[LG_OP_ADD] = 1.0},
    [LG_PROFILE_SEARCH] = {[LG_OP_SEARCH] = 1.0},
};

void lg_workload_mix(enum lg_profile p, double mix[LG_OP_COUNT_])
{
    memcpy(mix, mixes[p], sizeof(mixes[p]));
}

static double rand_unit(uint64_t *rng)
{
    return (double)(lg_rand(rng) >> 11) / 9007199254740992.0;
}

static unsigned zipf_rank(const struct lg_workload *wl, uint64_t *rng)
{
    double u = rand_unit(rng);
    unsigned lo = 0, hi = VOCAB_SIZE - 1;

    while (lo < hi) {
        unsigned mid = (lo + hi) / 2;
        if (wl->zipf_cdf[mid] < u)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static void build_vocabulary(struct lg_workload *wl)
{
    double total = 0, run = 0;

    /* Two syllables for the first 1,024 words, three for the rest: all distinct. */
    for (unsigned i = 0; i < VOCAB_SIZE; i++) {
        char *w = wl->vocab[i];
        memcpy(w, syllables[i % 32], 2);
        memcpy(w + 2, syllables[(i / 32) % 32], 2);
        w[4] = '\0';
        if (i >= 1024) {
            memcpy(w + 4, syllables[i / 1024], 2);
            w[6] = '\0';
        }
    }
    for (unsigned i = 0; i < VOCAB_SIZE; i++)
        total += 1.0 / (i + 1);
    for (unsigned i = 0; i < VOCAB_SIZE; i++) {
        run += 1.0 / (i + 1) / total;
        wl->zipf_cdf[i] = run;
    }
    wl->zipf_cdf[VOCAB_SIZE - 1] = 1.0;
}

static void fill_text(struct lg_workload *wl, uint64_t *rng)
{
    size_t off = 0, words = 0;

    while (off < wl->pool_len) {
        const char *w = wl->vocab[zipf_rank(wl, rng)];
        size_t n = strlen(w);
        if (n > wl->pool_len - off)
            n = wl->pool_len - off;
        memcpy(wl->pool + off, w, n);
        off += n;
        if (off < wl->pool_len)
            wl->pool[off++] = ++words % 12 == 0 ? '\n' : ' ';
    }
}

static void fill_random(struct lg_workload *wl, uint64_t *rng)
{
    for (size_t off = 0; off < wl->pool_len; off += 8) {
        uint64_t v = lg_rand(rng);
        size_t n = wl->pool_len - off < 8 ? wl->pool_len - off : 8;
        memcpy(wl->pool + off, &v, n);
    }
}

int lg_workload_new(struct lg_workload **out, const struct lg_config *cfg)
{
    struct lg_workload *wl = calloc(1, sizeof(*wl));
    uint64_t rng = cfg->seed ^ 0x636169726eull;

    if (!wl)
        return -ENOMEM;
    wl->cfg = cfg;
    /*
     * The seed makes the sequence of ops and documents repeatable; the nonce,
     * different in every run, keeps one run's documents from deduplicating
     * against another's in the same daemon.
     */
    wl->nonce = lg_rand(&rng) ^ ((uint64_t)time(NULL) << 20) ^ (uint64_t)getpid();
    wl->pool_len = cfg->file_size + POOL_EXTRA;
    wl->pool = malloc(wl->pool_len);
    wl->doc = malloc(cfg->file_size > 0 ? cfg->file_size : 1);
    wl->seeded = calloc(cfg->files > 0 ? cfg->files : 1, sizeof(*wl->seeded));
    if (!wl->pool || !wl->doc || !wl->seeded) {
        lg_workload_free(wl);
        return -ENOMEM;
    }
    build_vocabulary(wl);
    if (cfg->content == LG_CONTENT_TEXT)
        fill_text(wl, &rng);
    else
        fill_random(wl, &rng);
    *out = wl;
    return 0;
}

struct lg_workload *lg_workload_free(struct lg_workload *wl)
{
    if (!wl)
        return NULL;
    free(wl->pool);
    free(wl->doc);
    free(wl->seeded);
    free(wl);
    return NULL;
}

void lg_workload_set_seeded(struct lg_workload *wl, unsigned index, const char *hash)
{
    if (index >= wl->cfg->files)
        return;
    snprintf(wl->seeded[index], sizeof(wl->seeded[index]), "%s", hash);
    wl->nseeded++;
}

unsigned lg_workload_seeded(const struct lg_workload *wl)
{
    return wl->nseeded;
}

const char *lg_workload_seeded_hash(const struct lg_workload *wl, uint64_t *rng)
{
    /* Documents whose seeding failed have no hash; a get of "" fails, and is counted. */
    return wl->cfg->files ? wl->seeded[lg_rand(rng) % wl->cfg->files] : "";
}

void lg_workload_query(struct lg_workload *wl, uint64_t *rng, struct client_search_req *out)
{
    const char *first = wl->vocab[lg_rand(rng) % VOCAB_SIZE];

    /* Seven queries in ten are one word, the rest two. */
    if (lg_rand(rng) % 10 < 7)
        snprintf(wl->query_buf, sizeof(wl->query_buf), "%s", first);
    else
        snprintf(wl->query_buf, sizeof(wl->query_buf), "%s %s", first,
                 wl->vocab[zipf_rank(wl, rng)]);
    memset(out, 0, sizeof(*out));
    out->query = wl->query_buf;
}

/*
 * The document of add number `unique`: a first line that no other document
 * has, then content cut from the pool at an offset derived from `unique`.
 */
static size_t make_document(struct lg_workload *wl, uint64_t unique, bool seed)
{
    size_t size = wl->cfg->file_size, head, off;
    char line[96];
    int n;

    n = snprintf(line, sizeof(line), "cairn-loadgen %016" PRIx64 " %s %" PRIu64 "\n", wl->nonce,
                 seed ? "seed" : "add", unique);
    head = (size_t)n < size ? (size_t)n : size;
    memcpy(wl->doc, line, head);
    uint64_t mix = unique * 0x9e3779b97f4a7c15ull;
    off = (size_t)(lg_rand(&mix) % (POOL_EXTRA - 1));
    memcpy(wl->doc + head, wl->pool + off, size - head);
    return size;
}

const uint8_t *lg_workload_document(struct lg_workload *wl, uint64_t unique, bool seed,
                                    const char **name, size_t *len)
{
    *len = make_document(wl, unique, seed);
    snprintf(wl->name_buf, sizeof(wl->name_buf), "%s/%016" PRIx64 "/%" PRIu64,
             seed ? "seed" : "add", wl->nonce, unique);
    *name = wl->name_buf;
    return wl->doc;
}

static int encode_add(struct lg_workload *wl, msgpack_sbuffer *sbuf, uint64_t id, uint64_t unique,
                      bool seed)
{
    static const char *const seed_tags[] = {"loadgen-seed"};
    static const char *const add_tags[] = {"loadgen"};
    struct client_add_req req = {
        .mime = wl->cfg->content == LG_CONTENT_TEXT ? "text/plain" : "application/octet-stream",
        .tags = seed ? seed_tags : add_tags,
        .n_tags = 1,
    };
    const char *name;
    size_t size, first, off;
    size_t restore = sbuf->size;
    const uint8_t *doc = lg_workload_document(wl, unique, seed, &name, &size);
    int r;

    req.name = name;
    first = size < PROTO_MAX_DATA ? size : PROTO_MAX_DATA;
    r = client_encode_add(sbuf, id, &req, (int64_t)size, doc, first, first < size);
    for (off = first; r == 0 && off < size;) {
        size_t n = size - off < PROTO_MAX_DATA ? size - off : PROTO_MAX_DATA;
        r = client_encode_data(sbuf, id, doc + off, n, off + n < size);
        off += n;
    }
    if (r < 0)
        sbuf->size = restore; /* no half-sent add */
    return r;
}

int lg_workload_encode(struct lg_workload *wl, msgpack_sbuffer *sbuf, uint64_t id,
                       const struct lg_request *req, bool seed)
{
    switch (req->op) {
    case LG_OP_GET:
        return client_encode_get(sbuf, id, req->ref);
    case LG_OP_DELETE:
        return client_encode_delete(sbuf, id, req->ref);
    case LG_OP_SEARCH:
        return client_encode_search(sbuf, id, &req->search);
    case LG_OP_ADD:
        return encode_add(wl, sbuf, id, req->unique, seed);
    default:
        return -EINVAL;
    }
}
