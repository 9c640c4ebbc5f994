/* nn_grad.h — backward passes of conv2d and pooling for the autodiff rules.
 * Ownership: each returns a new contiguous tensor (or NULL with the error set);
 * tensor arguments are borrowed; `at` is the forward op's attributes. */
#ifndef TFE_NN_GRAD_H
#define TFE_NN_GRAD_H

#include "tensor/ops.h"
#include "tensor/base.h"

/* d(loss)/d(input) of conv2d: dy (N, OH, OW, Cout), w (KH, KW, Cin, Cout),
 * x_shape = the forward input's shape (N, H, W, Cin). Result: x_shape, w's dtype. */
tfe_tensor *tfe_conv2d_grad_input(tfe_tensor *dy, tfe_tensor *w, const int64_t x_shape[4],
                                  const tfe_attrs *at);

/* d(loss)/d(filter) of conv2d: x (N, H, W, Cin), dy (N, OH, OW, Cout),
 * w_shape = the filter's shape (KH, KW, Cin, Cout). Result: w_shape, x's dtype. */
tfe_tensor *tfe_conv2d_grad_filter(tfe_tensor *x, tfe_tensor *dy, const int64_t w_shape[4],
                                   const tfe_attrs *at);

/* max_pool2d backward: each dy cell goes to the first maximum of its window in x. */
tfe_tensor *tfe_max_pool2d_grad(tfe_tensor *x, tfe_tensor *dy, const tfe_attrs *at);

/* avg_pool2d backward: each dy cell is spread evenly over the valid cells of its window. */
tfe_tensor *tfe_avg_pool2d_grad(tfe_tensor *dy, const int64_t x_shape[4], const tfe_attrs *at);

/* The same, writing into dx/dw: a contiguous tensor of the result's shape and
 * dtype that the caller allocated (the backward ops' kernels, whose outputs
 * the dispatcher allocates). 0, or -1 with the error set. */
int kn_conv2d_grad_input_into(tfe_tensor *dy, tfe_tensor *w, const int64_t x_shape[4],
                              const tfe_attrs *at, tfe_tensor *dx);
int kn_conv2d_grad_filter_into(tfe_tensor *x, tfe_tensor *dy, const int64_t w_shape[4],
                               const tfe_attrs *at, tfe_tensor *dw);
int kn_max_pool2d_grad_into(tfe_tensor *x, tfe_tensor *dy, const tfe_attrs *at, tfe_tensor *dx);
int kn_avg_pool2d_grad_into(tfe_tensor *dy, const int64_t x_shape[4], const tfe_attrs *at,
                            tfe_tensor *dx);


#endif
