/* sig.h — signatures (docs/staging.md): a value flattened into the bytes that
 * identify its structure and non-tensor parts, the dims of its tensors, and
 * its tensor leaves; and the way back from a template and leaves to a value. */
#ifndef TFE_STAGE_SIG_H
#define TFE_STAGE_SIG_H

#include "graph/graph.h"
#include "stage/host_node.h"

typedef struct SigBuf {
    char *b;
    size_t n, cap;
    int64_t *dims;       /* every tensor leaf's shape, in leaf order */
    int nd, capd;
    bool too_deep;       /* lists or records nested deeper than SIG_MAX_DEPTH (one that
                            contains itself): flattened no further */
} SigBuf;

/* How deep sig_flatten follows nested lists, tuples and records. */
#define SIG_MAX_DEPTH 200
/* Does v nest lists, tuples or records deeper than SIG_MAX_DEPTH (from
 * depth, 0 at the top)? A value that contains itself does: the walks over
 * a staged function's values (signatures, snapshots) would never end. */
bool sig_too_deep(Value v, int depth);

/* Owned refs. {0} starts empty on the heap; LEAVES_ON_STACK gives it a
 * small first buffer (no malloc for the few leaves of a typical call). */
typedef struct Leaves { tfe_tensor **t; int n, cap; bool heap; } Leaves;
#define LEAVES_ON_STACK(name, buf) tfe_tensor *buf[16]; Leaves name = {.t = buf, .cap = 16}

void sig_free(SigBuf *s);
void sig_copy(SigBuf *dst, const SigBuf *src);   /* dst starts empty */
static inline void sig_reset(SigBuf *s) { s->n = 0; s->nd = 0; s->too_deep = false; }
void leaves_free(Leaves *l);
void leaves_push(Leaves *l, tfe_tensor *t);   /* takes t */

/* Append v: tensors are leaves (dtype, weak, rank go into the bytes, the
 * dims into dims); bools, strings, nil and ranges by value; functions,
 * modules and objects (variables) by identity; tuples, lists and records by
 * structure. Numbers are leaves too, except inside a container of an input
 * (SIG_INPUT), where they are part of the signature by value: a container
 * passed in is the caller's own object, and a number in it has no tensor
 * to stand for it. lv may be NULL (then only the signature). */
enum { SIG_INPUT, SIG_OUTPUT };
void sig_flatten(Value v, SigBuf *s, Leaves *lv, int mode);

/* A value of tmpl's structure whose k-th number/tensor leaf is leaves[*k]
 * (incref'd; *k advances). unbox: 0-d results become unboxed scalars (a
 * call's results) or stay boxed (values the tracer hands to the body).
 * Lists and records are new; they carry stamp as their trace id. */
Value sig_rebuild(Value tmpl, tfe_tensor *const *leaves, int *k, bool unbox, uint32_t stamp);

/* A copy of v's tuples, lists and records (new objects with the same
 * elements; everything else is shared): v as it is now. */
Value sig_copy_containers(Value v);

/* Put leaves[*k], leaves[*k + 1], ... in place of v's number/tensor leaves,
 * in sig_flatten's order, inside v's own lists, tuples and records (which
 * keep their identity; numbers become boxed tensors). */
void sig_replace_leaves(Value v, tfe_tensor *const *leaves, int *k);

/* sig_rebuild keeping aliasing: a list, tuple or record that tmpl holds
 * more than once (`(xs, xs)`) is rebuilt once, and every place holds that one
 * object, as in tmpl. One memo can serve several rebuilds (a call's result
 * and the bindings it writes back); sig_memo_free releases it. */
typedef struct SigMemo { const void **from; Value *to; int n, cap; } SigMemo;
Value sig_rebuild_shared(Value tmpl, tfe_tensor *const *leaves, int *k, bool unbox, uint32_t stamp, SigMemo *m);
void sig_memo_free(SigMemo *m);
/* Rebuild the object from as `to` (a new reference is taken). */
void sig_memo_add(SigMemo *m, const void *from, Value to);
const Value *sig_memo_find(const SigMemo *m, const void *from);   /* or NULL */
/* sig_copy_containers keeping aliasing: m maps each object copied to its copy. */
Value sig_copy_shared(Value v, SigMemo *m);

/* Keep every object v's signature names by identity alive (its address must
 * not be reused by another object while a trace compares against it). */
void sig_hold(Value v, Value **held, int *nheld);

/* Same dtype, shape and bits (NaNs equal to themselves; -0.0 not 0.0), with
 * at most max_elems elements (-1: any number); false for symbolic tensors. */
static inline bool sig_tensor_equal(const tfe_tensor *a, const tfe_tensor *b, int64_t max_elems)
{
    return graph_tensor_equal(a, b, max_elems);
}

/* The same leaf of a value passed out and back: the same tensor, or a
 * number of the same value (a number is unboxed on the way out). */
bool sig_same_leaf(const tfe_tensor *a, const tfe_tensor *b);

/* Does v contain a function (results and outside writes must not)? */
bool sig_has_function(Value v);

#endif
