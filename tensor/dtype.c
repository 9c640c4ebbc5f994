/* dtype.c — dtype sizes, names and the promotion rule (docs/language.md "Values"),
 * plus float16/bfloat16 bit conversions used when reading/writing them. */
#include <string.h>

#include <math.h>

#include "tensor/base.h"
#include "tensor/tensor.h"
#include "util/half.h"

static const size_t sizes[TFE_NDTYPES] = {1, 4, 8, 4, 8, 2, 2};
static const char *const names[TFE_NDTYPES] = {"bool", "int32", "int64", "float32",
                                               "float64", "float16", "bfloat16"};

size_t dtype_size(tfe_dtype dt) { return (unsigned)dt < TFE_NDTYPES ? sizes[dt] : 0; }

const char *dtype_name(tfe_dtype dt) { return (unsigned)dt < TFE_NDTYPES ? names[dt] : "?"; }

int dtype_from_name(const char *name) {
    for (int i = 0; i < TFE_NDTYPES; i++)
        if (strcmp(name, names[i]) == 0) return i;
    return -1;
}

/* 0 bool, 1 int, 2 float */
static int kind(tfe_dtype dt) { return dt == TFE_BOOL ? 0 : dtype_is_int(dt) ? 1 : 2; }

/* Position in the promotion order: the half types sit below float32
 * (NumPy: float16 + float32 is float32), side by side. */
static int order(tfe_dtype dt) {
    static const int o[TFE_NDTYPES] = {[TFE_BOOL] = 0, [TFE_INT32] = 1, [TFE_INT64] = 2, [TFE_FLOAT16] = 3,
                                       [TFE_BFLOAT16] = 3, [TFE_FLOAT32] = 4, [TFE_FLOAT64] = 5};
    return o[dt];
}

static tfe_dtype higher(tfe_dtype a, tfe_dtype b) {
    if (a != b && order(a) == order(b)) return TFE_FLOAT32; /* float16 with bfloat16 (as PyTorch) */
    return order(a) > order(b) ? a : b;
}

tfe_dtype dtype_promote(tfe_dtype a, bool weak_a, tfe_dtype b, bool weak_b, bool *weak_out) {
    if (weak_out) *weak_out = weak_a && weak_b;
    if (weak_a == weak_b) return higher(a, b);
    /* exactly one weak: it adopts the strong one's dtype unless its kind is higher */
    tfe_dtype w = weak_a ? a : b, s = weak_a ? b : a;
    if (kind(w) <= kind(s)) return s;
    return kind(w) == 2 ? TFE_FLOAT32 : TFE_INT64;
}

/* IEEE half and bfloat16 <-> double: util/half.h's conversions (shared with
 * dist/, which reduces half buffers), through float (round to nearest even
 * on the way down) */
double kn_half_to_f64(uint16_t h) { return half_to_float(h); }
uint16_t kn_f64_to_half(double v) { return float_to_half((float)v); }
double kn_bf16_to_f64(uint16_t h) { return bf16_to_float(h); }
uint16_t kn_f64_to_bf16(double v) { return float_to_bf16((float)v); }
