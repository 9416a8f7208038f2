/*
 * Record payloads past their checksum: the first input byte picks a record
 * type, the rest is the payload, and the harness frames it with a valid
 * header and CRC (as a pack written by a faulty or hostile peer would
 * carry), so the chunk table and zstd envelope decoders are reached instead
 * of stopping at the checksum.
 */
#include <stdlib.h>
#include <string.h>

#include "daemon/format/record.h"
#include "storage/pack/pack.h"
#include "tests/fuzz/fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const enum pack_rec_type types[] = {PACK_REC_BLOCK, PACK_REC_MANIFEST, PACK_REC_ENTRY};
    enum pack_rec_type type;
    uint8_t id[PROTO_HASH_LEN], *rec, *raw = NULL;
    struct pack_block_chunk *chunks = NULL;
    struct pack_record parsed;
    struct pack_part part;
    uint32_t count;
    size_t raw_len;

    if (size < 1 || size - 1 > PACK_MAX_PAYLOAD)
        return 0;
    type = types[data[0] % 3];
    part.data = data + 1;
    part.len = size - 1;
    /* An id that is not the payload's hash: a seal must then be refused. */
    memset(id, data[0], sizeof(id));
    if (!(rec = malloc(PACK_RECORD_HEADER + part.len)))
        return 0;
    pack_record_header_encode(rec, type, id, &part, 1);
    memcpy(rec + PACK_RECORD_HEADER, part.data, part.len);
    if (pack_record_parse(rec, PACK_RECORD_HEADER + part.len, &parsed) != 0) {
        free(rec); /* a payload the format cannot hold (empty) */
        return 0;
    }
    if (record_block_open(rec, PACK_RECORD_HEADER + part.len, &chunks, &count, &raw, &raw_len) ==
        0) {
        free(chunks);
        free(raw);
        raw = NULL;
    }
    if (type != PACK_REC_BLOCK && record_seal_open(rec, PACK_RECORD_HEADER + part.len, type, id,
                                                   1u << 20, &raw, &raw_len) == 0)
        free(raw);
    free(rec);
    return 0;
}
