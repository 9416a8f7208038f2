#pragma once

/*
 * Fuzzy search's copy of the index vocabulary (fts.c), with a trigram
 * index over it, so that widening a word looks at the few terms that can be
 * near it instead of every term of the index.
 *
 * A term within d edits of a word (insertions, deletions, substitutions,
 * adjacent transpositions) keeps all but at most 4d of the word's distinct
 * trigrams, the word padded with two marks at each end (an edit touches at
 * most three of them, a transposition four); a term that contains the word
 * has every trigram of the unpadded word. vocab_candidates() returns the
 * terms that pass those counts: a superset of the near and containing terms,
 * which the caller checks exactly. Words with bytes outside ASCII, and words
 * too short for the count to exclude anything, get every term.
 *
 * Built on one thread, then only read (the caller serialises rebuilds).
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct vocab_term {
    const char *text; /* not NUL-terminated */
    uint32_t len;
    int64_t docs;
};

struct vocab;

struct vocab *vocab_new(void);
struct vocab *vocab_free(struct vocab *v);
/* Appends a term while loading: 0 or -ENOMEM. */
int vocab_add(struct vocab *v, const char *text, size_t len, int64_t docs);
/* Builds the trigram index once every term is added: 0 or -ENOMEM. */
int vocab_seal(struct vocab *v);
size_t vocab_count(const struct vocab *v);
const struct vocab_term *vocab_term(const struct vocab *v, size_t i);

/* The term text[0..len) exactly, or NULL. */
const struct vocab_term *vocab_find(const struct vocab *v, const char *text, size_t len);

/*
 * Calls fn for each term that may be within `maxd` edits of `word` (folded,
 * as the index holds terms) or, with `contained`, may contain it. Not
 * thread-safe: it uses the vocabulary's scratch space.
 */
typedef void vocab_candidate_fn(void *ctx, const struct vocab_term *t);
void vocab_candidates(struct vocab *v, const char *word, size_t len, unsigned maxd, bool contained,
                      vocab_candidate_fn *fn, void *ctx);
