#pragma once

/*
 * The search query language (README "Search"), compiled to an SQLite FTS5
 * match expression. Every user word becomes a quoted FTS5 string, so no
 * input can reach FTS5's own syntax: what the user can express is exactly
 * words (all must match), "quoted phrases", OR between terms, NOT / -word,
 * prefix*, name:word and tag:value. Anything malformed is rejected with a
 * message for the user, never passed on.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "daemon/search/search.h"
#include "proto/proto.h"

/* Expected outcome (positive): the query is malformed; the message says how. */
enum {
    SEARCH_E_INVALID = 1,
};

#define SEARCH_MAX_TERMS 64

enum search_term_kind {
    SEARCH_WORD,   /* a word; fuzzy search may widen it */
    SEARCH_PHRASE, /* "several words" */
    SEARCH_PREFIX, /* word* */
    SEARCH_NAME,   /* name:word, matched in the name column only */
};

struct search_term {
    enum search_term_kind kind;
    char *text;
    /* Alternatives a fuzzy search added (similar indexed words). */
    char **alts;
    size_t nalts;
    /* Fuzzy search: the word as typed (or a part of it) is in no document, a typo. */
    bool unknown;
};

/* Positive terms come in groups: the terms of one group are alternatives (OR). */
struct search_group {
    struct search_term *terms;
    size_t nterms;
    /*
     * In at least half the indexed documents: BM25 gives it no weight, so in
     * a ranked (any word) query it makes no hit on its own (db_search).
     */
    bool weak;
};

struct search_query {
    struct search_group *groups;
    size_t ngroups;
    struct search_term *negatives;
    size_t nnegatives;
    char **tags; /* tag:value filters; all must match */
    size_t ntags;
    bool all_words; /* AND was written: every group required, as the `all` option */
};

/* Parses `text`; on SEARCH_E_INVALID *msg says what is wrong. 0, SEARCH_E_INVALID or -ENOMEM. */
int search_parse(const char *text, size_t len, struct search_query *q, const char **msg);
void search_query_clear(struct search_query *q);

/* True when the query has words to match (a filter-only query has none). */
bool search_has_match(const struct search_query *q);

/* Which words of a query an FTS5 expression widens with their fuzzy alternatives. */
enum search_alts {
    SEARCH_ALTS_NONE,    /* the query as typed */
    SEARCH_ALTS_UNKNOWN, /* only the words in no document (typos) */
    SEARCH_ALTS_ALL,     /* every word */
};

/*
 * Builds the FTS5 match expression (malloc'd) for a query with words, its
 * groups required (search_fts_expr) or any of them (search_fts_expr_any,
 * for ranking: negated words are still excluded).
 */
int search_fts_expr(const struct search_query *q, enum search_alts alts, char **out);
/* Groups marked weak are left out of it (at least one group must not be). */
int search_fts_expr_any(const struct search_query *q, enum search_alts alts, char **out);
/* The expression of group `g` alone, as typed. */
int search_fts_group(const struct search_query *q, size_t g, char **out);
/* True when fuzzy widening gave some word of the query alternatives. */
bool search_has_alts(const struct search_query *q);

/*
 * Edit distance in letters (code points) between two short UTF-8 strings,
 * a transposition of two adjacent letters counting as one edit, capped:
 * returns at most max + 1. Used to widen fuzzy words with similar
 * indexed words.
 */
unsigned search_distance(const char *a, size_t alen, const char *b, size_t blen, unsigned max);
/* The number of letters (code points) of a UTF-8 string. */
size_t search_letters(const char *s, size_t len);
/*
 * Folds a word the way the index does (lower case, Latin diacritics removed)
 * into out[0..cap), NUL-terminated; returns its length.
 */
size_t search_fold(const char *s, size_t len, char *out, size_t cap);

/*
 * A snippet of `text` for a query: about `words` words around the first
 * match, matched words marked **like this**. Linear in the text: a byte
 * search finds ASCII words anywhere, the tokenizing scan looks at most
 * SEARCH_SNIPPET_SCAN bytes. NULL when out of memory.
 */
#define SEARCH_SNIPPET_SCAN (1024u * 1024)
/* Bytes of a document read to make its snippet. */
#define SEARCH_SNIPPET_READ (16u * 1024 * 1024)
char *search_snippet(const char *text, size_t len, const struct search_query *q, unsigned words);
