/* test_views.c — reshape/transpose/slice/broadcast_to/expand_dims/split are
 * views that share storage and read the right elements; reshape of a
 * non-contiguous tensor and tensor_contiguous copy. */
#include <stdlib.h>
#include <string.h>

#include "tensor/ops.h"
#include "tests/unit/check.h"

static tfe_tensor *iota(int rank, const int64_t *shape) {
    tfe_tensor *t = tensor_new(TFE_INT64, rank, shape);
    int64_t n = tensor_numel(t);
    for (int64_t i = 0; i < n; i++) ((int64_t *)tensor_data(t))[i] = i;
    return t;
}

static tfe_tensor *run1(tfe_op op, tfe_tensor *x, const tfe_attrs *at) {
    tfe_tensor *r = tfe_call1(op, 1, &x, at);
    REQUIRE(r, "%s failed: %s", tfe_ops[op].name, tfe_error_msg());
    return r;
}

static void expect_str(tfe_tensor *t, const char *want) {
    char *s = tensor_to_string(t);
    CHECK(strcmp(s, want) == 0, "got\n%s\nwant\n%s", s, want);
    free(s);
}

int main(void) {
    int64_t s23[2] = {2, 3};
    tfe_tensor *x = iota(2, s23);
    tfe_attrs at;

    /* reshape of contiguous data: a view */
    tfe_attrs_init(&at);
    at.nints = 2;
    at.ints[0] = 3;
    at.ints[1] = 2;
    tfe_tensor *r = run1(OP_RESHAPE, x, &at);
    CHECK(r->storage == x->storage, "reshape copied contiguous data");
    CHECK(tensor_get_i64(r, 5) == 5 && r->shape[0] == 3, "reshape reads wrong");
    expect_str(r, "[[0, 1],\n [2, 3],\n [4, 5]]");

    /* transpose: a view with swapped strides */
    tfe_attrs_init(&at);
    tfe_tensor *tr = run1(OP_TRANSPOSE, x, &at);
    CHECK(tr->storage == x->storage, "transpose copied");
    CHECK(!tensor_is_contiguous(tr), "transpose reported contiguous");
    CHECK(tensor_get_i64(tr, 1) == 3 && tensor_get_i64(tr, 2) == 1, "transpose reads wrong");
    expect_str(tr, "[[0, 3],\n [1, 4],\n [2, 5]]");

    /* reshape of the non-contiguous transpose: a copy with the right order */
    tfe_attrs_init(&at);
    at.nints = 1;
    at.ints[0] = 6;
    tfe_tensor *flat = run1(OP_RESHAPE, tr, &at);
    CHECK(flat->storage != x->storage, "reshape of a transpose must copy");
    expect_str(flat, "[0, 3, 1, 4, 2, 5]");

    /* contiguous: copy of a view, identity of a contiguous tensor */
    tfe_tensor *c = tensor_contiguous(tr);
    CHECK(c != tr && tensor_is_contiguous(c), "tensor_contiguous did not copy a transpose");
    tfe_tensor *c2 = tensor_contiguous(x);
    CHECK(c2 == x && x->refcount == 2, "tensor_contiguous copied a contiguous tensor");
    tensor_decref(c2);

    /* slice x[1, ::-2] (ints per axis: start, stop, step; axis 0 dropped) */
    tfe_attrs_init(&at);
    at.naxes = 1;
    at.axes[0] = 0;
    at.nints = 6;
    int64_t sl[6] = {1, 2, 1, 2, -1, -2};
    memcpy(at.ints, sl, sizeof sl);
    tfe_tensor *s = run1(OP_SLICE, x, &at);
    CHECK(s->storage == x->storage, "slice copied");
    expect_str(s, "[5, 3]");

    /* broadcast_to: stride 0 */
    tfe_attrs_init(&at);
    at.nints = 3;
    at.ints[0] = 4;
    at.ints[1] = 2;
    at.ints[2] = 3;
    tfe_tensor *b = run1(OP_BROADCAST_TO, x, &at);
    CHECK(b->storage == x->storage && b->strides[0] == 0, "broadcast_to is not a stride-0 view");
    CHECK(tensor_get_i64(b, 3 * 6 + 4) == 4, "broadcast_to reads wrong");

    /* expand_dims / squeeze of the transpose stay views */
    tfe_attrs_init(&at);
    at.naxes = 1;
    at.axes[0] = 1;
    tfe_tensor *e = run1(OP_EXPAND_DIMS, tr, &at);
    CHECK(e->storage == x->storage && e->rank == 3 && e->shape[1] == 1, "expand_dims not a view");
    tfe_attrs_init(&at);
    tfe_tensor *q = run1(OP_SQUEEZE, e, &at);
    CHECK(q->storage == x->storage && q->rank == 2, "squeeze not a view");
    expect_str(q, "[[0, 3],\n [1, 4],\n [2, 5]]");

    /* split: views */
    tfe_attrs_init(&at);
    at.axes[0] = 1;
    at.nints = 2;
    at.ints[0] = 1;
    at.ints[1] = 2;
    tfe_tensor *parts[2];
    REQUIRE(tfe_execute(OP_SPLIT, 1, &x, &at, parts) == 0, "split: %s", tfe_error_msg());
    CHECK(parts[0]->storage == x->storage && parts[1]->storage == x->storage, "split copied");
    expect_str(parts[1], "[[1, 2],\n [4, 5]]");

    /* a view keeps the storage alive after the base is released */
    tensor_decref(x);
    expect_str(tr, "[[0, 3],\n [1, 4],\n [2, 5]]");

    tfe_tensor *all[] = {r, tr, flat, c, s, b, e, q, parts[0], parts[1]};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) tensor_decref(all[i]);
    tfe_alloc_trim();
    CHECK(tfe_alloc_get_stats().live_bytes == 0, "%zu bytes still live",
          tfe_alloc_get_stats().live_bytes);
    return check_done("test_views");
}
