/* collective.h — the agreement every collective makes before it moves data
 * (tensor/kernels_dist.c): the ops of ops_dist.def and the interpreter's
 * dist.barrier share it, so a mismatch reads the same wherever it is met. */
#ifndef TFE_COLLECTIVE_H
#define TFE_COLLECTIVE_H

#include <stdbool.h>
#include <stdint.h>
#include "tensor/tensor.h"

/* What a rank is about to do: kind is OP_ALLREDUCE, OP_BROADCAST,
 * OP_ALLGATHER or TFE_COLL_BARRIER; arg the reduction (allreduce) or root
 * (broadcast); nleaves and hash describe a packed container (1 and 0 for a
 * plain tensor). */
enum { TFE_COLL_BARRIER = -1 };
typedef struct tfe_coll_desc {
    int32_t kind, arg, dtype, rank;
    int64_t shape[TFE_MAX_RANK];
    int64_t nleaves, hash;
    /* where the bytes move: 1 on the device (NCCL, tensor/device.h's
     * tfe_device_coll_path), 0 through the host and MPI; the two paths do not
     * meet, so ranks must agree on it too */
    int64_t path;
} tfe_coll_desc;

/* dist_agree on a hash of d. On a mismatch every rank gathers every rank's
 * descriptor and sets the same error, naming what differs ("dist.allreduce:
 * shapes differ across ranks: rank 0 has (3,) float32, rank 1 has (2,)
 * float32"). Returns 0, or -1 with the tensor error set. */
int tfe_coll_agree(const tfe_coll_desc *d);

/* tfe_coll_agree for an allreduce that may be nonblocking (dist_agree_nb):
 * a rank that runs a staged step cached overlaps its allreduces (graph/
 * exec_dist.c, *nonblocking true on entry) while another may run it eagerly
 * (the kernel: tfe_coll_agree, blocking). On return *nonblocking says
 * whether every rank wants it (then all make the nonblocking call, else all
 * the blocking one). The same one agreement as tfe_coll_agree. */
int tfe_coll_agree_nb(const tfe_coll_desc *d, bool *nonblocking);

/* A mean allreduce's last step, in place: the sum in o (contiguous, a
 * float dtype) divided by the size, in o's dtype. The kernel and the
 * overlapped wait (graph/exec_dist.c) share it, so they agree bit for bit. */
void tfe_coll_mean_divide(tfe_tensor *o, int size);

/* "dist.allreduce" for a kind. */
const char *tfe_coll_name(int kind);

#endif
