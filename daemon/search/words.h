#pragma once

/*
 * Words as the index sees them, shared by the query parser, the FTS5
 * expressions and the snippets (words.c): UTF-8 letters, an identifier's
 * other spellings, and a growing string. Internal to daemon/search; the
 * part's own users get folding and edit distance through query.h.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Decodes one UTF-8 sequence at *i, moving past it; invalid bytes decode as themselves. */
uint32_t words_next_char(const char *s, size_t len, size_t *i);
/*
 * Whether the index's tokenizer (unicode61) keeps this code point as part
 * of a word: letters and digits, by an approximation by blocks.
 */
bool words_is_char(uint32_t cp);
/* A word counts only if the tokenizer will keep something of it. */
bool words_searchable(const char *s, size_t len);

/*
 * Identifiers. The index's tokenizer splits words at punctuation only:
 * `epoll_wait`, `epoll.wait` and `epoll wait` are the words `epoll` and
 * `wait` in a row, but `EpollWait` is the one word `epollwait`. So a term
 * also matches its other spellings: split at its capitals too, as a phrase
 * (`EpollWait`, `epollWait` find `epoll_wait`), and with its parts run
 * together (`epoll_wait` finds `EpollWait`).
 */
#define WORDS_IDENT_MAX 256

/*
 * The term's words split at capitals as well (a capital after a lower-case
 * letter or a digit, or before a lower-case letter after a capital:
 * `HTTPClient` is `HTTP Client`), space-separated, into split; its words
 * run together into joined. Either is empty when it is no other spelling of
 * the term, and both for a quoted phrase (its words are words, not an
 * identifier's parts).
 */
void words_ident_forms(const char *s, char split[WORDS_IDENT_MAX], char joined[WORDS_IDENT_MAX]);

/* A growing string; `failed` sticks once an allocation fails. */
struct sbuf {
    char *s;
    size_t len, cap;
    bool failed;
};

void sbuf_put(struct sbuf *b, const char *s, size_t n);
void sbuf_cstr(struct sbuf *b, const char *s);
/* Hands the string over (0), or frees it and returns -ENOMEM if anything failed. */
int sbuf_done(struct sbuf *b, char **out);
