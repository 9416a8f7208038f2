/*
 * A pack file as read back from a backend: its header, the walk over its
 * records (as replay and repair do), a block record's chunk table, and the
 * trailer and index at its end (as a sealed pack's reader does).
 */
#include <stdlib.h>

#include "storage/pack/pack.h"
#include "tests/fuzz/fuzz.h"

static int on_record(void *ctx, uint64_t offset, const struct pack_record *rec)
{
    struct pack_block_chunk *chunks = NULL;
    uint32_t count;
    size_t body_off;

    (void)ctx;
    (void)offset;
    if (rec->type == PACK_REC_BLOCK &&
        pack_block_parse(rec->payload, rec->length, &chunks, &count, &body_off) == 0)
        free(chunks);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint64_t seq, valid_end;
    bool sealed;
    struct pack_trailer t;
    struct pack_index_entry *entries = NULL;

    (void)pack_header_decode(data, size, &seq);
    (void)pack_scan(data, size, on_record, NULL, &valid_end, &sealed);
    if (size >= PACK_HEADER_SIZE + PACK_TRAILER_SIZE &&
        pack_trailer_parse(data + size - PACK_TRAILER_SIZE, size, &t) == 0 &&
        t.index_off <= size - PACK_TRAILER_SIZE &&
        pack_index_parse(data + t.index_off, size - PACK_TRAILER_SIZE - t.index_off, &t,
                         &entries) == 0)
        free(entries);
    return 0;
}
