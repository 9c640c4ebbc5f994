/* shape.c — axes and convolution geometry (tensor/base.h; base layer: no kernels). */
#include "tensor/base.h"

int kn_axis(const char *op, int64_t axis, int rank, int *out) {
    int64_t a = axis < 0 ? axis + rank : axis;
    if (a < 0 || a >= rank) {
        tfe_error_set("%s: axis %lld is out of range for rank %d", op, (long long)axis, rank);
        return -1;
    }
    *out = (int)a;
    return 0;
}

int kn_axes_mask(const char *op, const tfe_attrs *at, int rank, unsigned *mask) {
    if (at->naxes < 0) {
        *mask = rank ? (1u << rank) - 1 : 0;
        return 0;
    }
    unsigned m = 0;
    for (int i = 0; i < at->naxes; i++) {
        int a;
        if (kn_axis(op, at->axes[i], rank, &a)) return -1;
        if (m & (1u << a)) {
            tfe_error_set("%s: axis %d is repeated", op, a);
            return -1;
        }
        m |= 1u << a;
    }
    *mask = m;
    return 0;
}

/* TensorFlow's output size and leading pad for one spatial axis (base.h). */
bool kn_conv_out_size(int64_t in, int64_t k, int64_t d, int64_t s, bool same, int64_t *out,
                     int64_t *pad) {
    int64_t keff = (k - 1) * d + 1;
    if (same) {
        *out = (in + s - 1) / s;
        int64_t total = (*out - 1) * s + keff - in;
        *pad = total > 0 ? total / 2 : 0;
        return true;
    }
    *pad = 0;
    if (in < keff) return false;
    *out = (in - keff) / s + 1;
    return true;
}
