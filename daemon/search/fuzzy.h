#pragma once

/*
 * Fuzzy search's widening of the words of a query (fts.c): each word
 * gets the indexed words a small edit away (one edit for words of 4 to 7
 * letters, two from 8, only a transposition for 3; a transposition counts as
 * one edit) or that contain it (from 3 letters), so a typo or a fragment
 * still finds its documents. A word the index splits into parts (epoll_wait:
 * epoll, wait) is widened part by part, and its alternatives are the phrases
 * of the parts' alternatives, closest first: epol_wiat finds "epoll wait".
 */

#include "daemon/search/query.h"

struct vocab;

/* At most this many alternatives per word. */
#define FUZZY_MAX_ALTS 16

/* Sets t->alts; 0 or -ENOMEM. `v` is not shared while this runs (vocab_candidates). */
int fuzzy_widen(struct vocab *v, struct search_term *t);
