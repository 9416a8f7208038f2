#pragma once

/* The add pipeline's state (add.c: the loop side; add-work.c: the worker jobs and record lists). */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <openssl/evp.h>

#include "daemon/format/manifest.h"
#include "daemon/pack/packer.h"
#include "daemon/store/store-int.h"
#include "daemon/format/text.h"

/* Bytes a cut job takes at once (at least the largest chunk). */
#define STORE_SEGMENT (1024u * 1024)
/* Per add: segment jobs, record groups not yet durable, and segments waiting to be cut. */
#define STORE_MAX_SEGJOBS 4
#define STORE_MAX_GROUPS 8
#define STORE_MAX_READY 8

struct rawbuf {
    uint8_t *data;
    size_t len;
};

/* Records, as a growing array. */
struct rec_list {
    struct packer_rec *v;
    size_t n;
};

/* A record group this add sent to the pack writer. */
struct add_group {
    struct packer_group g;
    struct rec_list recs;
    struct store_add *add;
};

/* A cut segment: its chunks are hashed and looked up, the new ones compressed into a block. */
struct seg_job {
    uv_work_t work;
    struct store_add *add;
    struct rawbuf seg;
    size_t *ends; /* chunk end offsets in seg */
    size_t nends;
    bool done;
    int status;
    struct manifest_entry *chunks; /* per chunk, in order */
    uint64_t stored;               /* the stored bytes of its chunks */
    uint64_t written;              /* the bytes of its new block records */
    struct rec_list blocks;        /* its new chunks, in blocks of at most RECORD_BLOCK_MAX */
    struct seg_job *next;
};

/* A full manifest list being stored as a segment record. */
struct spill {
    uv_work_t work;
    struct store_add *add;
    unsigned level;
    struct manifest_entry *list;
    size_t n;
    uint64_t bytes;
    int status;
    struct packer_rec rec;
    bool started, done;
    struct spill *next;
};

struct cut_job {
    uv_work_t work;
    struct store_add *add;
    struct rawbuf carry, in; /* consumed by the job */
    bool final;
    bool whole; /* the whole document: the job also does the segment and the entry */
    int status;
    struct seg_job *sj; /* the cut segment */
    struct rawbuf rest; /* bytes after the last cut: the next job's carry */
    bool unchanged;     /* the store already holds this, under this name: nothing to write */
    uint64_t stored_size;
    char mime[PROTO_MAX_MIME + 1]; /* unchanged: the stored document's */
    /* `whole`: the manifest root and the journal entry. */
    uint8_t *root;
    size_t root_len;
    struct packer_rec entry;
};

struct store_add {
    struct store *st;
    struct store_add_params p;
    const struct store_add_ops *ops;
    void *userdata;
    struct store_op op;
    uint64_t deadline_ms; /* its records go out before then, or it fails (store_write_deadline) */

    EVP_MD_CTX *doc_ctx;  /* used by the running cut job only */
    struct text_acc text; /* likewise */
    struct rawbuf fill;
    size_t fill_cap; /* grows to STORE_SEGMENT: small documents never hold a whole segment */
    struct rawbuf ready[STORE_MAX_READY]; /* full segments waiting for a cut job, FIFO */
    unsigned nready;
    struct rawbuf carry;
    bool told_full;
    uint64_t received;

    bool cut_running;
    unsigned cuts;                    /* cut jobs started */
    struct seg_job *segs, *segs_tail; /* in document order */
    unsigned nsegs;
    struct manifest_builder mb;
    struct spill *spills, *spills_tail; /* run one at a time, in order */
    unsigned groups;                    /* groups sent and not yet called back */
    uint64_t stored;
    uint64_t written;     /* bytes of the new block records: what the add added to the packs */
    struct rec_list last; /* the final segment's blocks, sent with the entry */

    bool finishing, final_cut_done, entry_started, committing, aborted;
    bool unchanged;
    int error;
    int final_status; /* the commit's failure, told once its entry is cancelled (void.c) */
    uint8_t doc_hash[PROTO_HASH_LEN];
    uint64_t ticket, entry_ns;
    uint8_t *root;
    size_t root_len;
    unsigned depth;
    uv_work_t entry_work;
    struct packer_rec entry;
    int entry_status;
    struct packer_group final;
    struct rec_list final_recs;
    struct db_add dba;
};

/* Records and lists of them (add-work.c). */
void add_list_clear(struct rec_list *l);
/* Appends a record (taken over); -ENOMEM leaves it with the caller. */
int add_list_push(struct rec_list *l, struct packer_rec *rec);

/* Worker jobs (add-work.c). */
void add_seg_work(uv_work_t *work);
void add_cut_work(uv_work_t *work);
int add_entry_build(struct store_add *add, uint64_t size, uint64_t nchunks, uint64_t stored,
                    bool text, unsigned depth, const uint8_t *root, size_t root_len,
                    struct packer_rec *rec);
