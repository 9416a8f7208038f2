#pragma once

/*
 * Compressing the blocks of small documents together. An add compresses its
 * own chunks, so a small document alone compresses poorly; when a batch of
 * the pack writer holds many such blocks (a bulk load), they are decoded and
 * compressed again as a few shared blocks, which is what makes many small
 * files cheap to store. Each original record then points at the shared
 * block that holds its chunks (packer_rec.merged) and is not written itself.
 * Runs on a worker thread.
 */

#include <stddef.h>

struct packer_rec;

/* Raw bytes of a shared block: small enough that reading one document decodes little. */
#define MERGE_BLOCK (64u * 1024)

/*
 * Merges the mergeable records among recs[0..n): 0 with the shared block
 * records in *out (malloc'd array of *nout, owned by the caller), or a
 * failure, after which no record is marked merged.
 */
int merge_blocks(struct packer_rec *const *recs, size_t n, int level, struct packer_rec **out,
                 size_t *nout);
