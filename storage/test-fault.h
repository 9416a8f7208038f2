#pragma once

/*
 * "fault", a backend for the front-end tests, plugged in with
 * backend_new_ops(). Its attempts end as each test's script says: with a
 * status on the next loop iteration, never (until cancelled), late, or by
 * refusing to start; fault_probe records what it was asked to do.
 */

#include "storage/test-storage.h"

#include <sys/uio.h>

/* Script entries beyond plain statuses. */
enum {
    FAULT_HANG = 100000, /* runs until cancelled, then ends with -ECANCELED */
    FAULT_SLOW,          /* ends with slow_status after slow_ms, cancelled or not */
    FAULT_REFUSE,        /* the start call fails with -EIO */
};

/* What the tests tell the fault backend, and what it saw; reset by each test. */
struct fault_probe {
    const int *script;
    size_t script_len;
    int rest; /* the outcome of attempts past the script */
    uint32_t slow_ms;
    int slow_status;
    int open_status; /* -EPERM: fail without a message */
    unsigned opens, starts, cancels, closes;
    char url[64];
    bool timer_closing_at_close;
    void (*on_start)(struct backend_req *req);
    void (*on_complete)(struct backend_req *req);
};

extern struct fault_probe fault_probe;

void fault_probe_reset(const int *script, size_t len, int rest);

#define FAULT_SCRIPT(rest, ...)                                                                    \
    do {                                                                                           \
        static const int script_[] = {__VA_ARGS__};                                                \
        fault_probe_reset(script_, ARRAY_SIZE(script_), rest);                                     \
    } while (0)

extern const struct backend_ops fault_ops;
/* The same without a way to interrupt an attempt, like local disk I/O. */
extern const struct backend_ops fault_nocancel_ops;
/* Without appends (the function is there, the capability is not) and lists. */
extern const struct backend_ops fault_bare_ops;

/* Opens a fault backend with fast, deterministic retries unless a test sets others. */
void fault_env_open(struct test_env *e, const struct backend_ops *ops);

/* A request of any kind; each begins with its struct backend_req. */
union fault_req {
    struct backend_put put;
    struct backend_get get;
    struct backend_head head;
    struct backend_del del;
    struct backend_list list;
    struct backend_append app;
};

extern const enum backend_op fault_all_ops[6];
/* What puts and appends write. */
extern struct iovec fault_payload;

/* Fills a valid request of kind `op`: a create-only put, an append at `offset`. */
void fault_fill(union fault_req *u, enum backend_op op, struct test_done *done, uint64_t offset);
/* Starts `u`, filled already, by its kind. */
int fault_start_filled(struct test_env *e, union fault_req *u, enum backend_op op);
int fault_start_any(struct test_env *e, union fault_req *u, enum backend_op op,
                    struct test_done *done, uint64_t offset);
/* Runs one request to its callback; returns its status, *attempts its tries. */
int fault_run(struct test_env *e, enum backend_op op, uint64_t offset, unsigned *attempts);
/* A get started now, with the loop's clock brought up to date first. */
void fault_start_get(struct test_env *e, struct backend_get *get, struct test_done *done,
                     uint32_t timeout_ms, uint64_t *started);
