/* print.c — tensor_to_string (docs/language.md "Values", NumPy's layout without line
 * wrapping) and format_float_shortest (Python repr rules on the shortest
 * digits that read back to the same value in the tensor's dtype). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <math.h>

#include "tensor/base.h"
#include "util/xalloc.h"

#define THRESHOLD 1000 /* summarise above this many elements (NumPy) */
#define EDGE 3

/* Whether the decimal text reads back to v in dtype dt (hv: v's bits in a
 * half type). Decimal -> double -> half rounds once in effect: these few
 * digits are never within 2^-53 of a halfway point. */
static bool reads_back(const char *text, double v, tfe_dtype dt, uint16_t hv) {
    if (dt == TFE_FLOAT16) return kn_f64_to_half(strtod(text, NULL)) == hv;
    if (dt == TFE_BFLOAT16) return kn_f64_to_bf16(strtod(text, NULL)) == hv;
    if (dt == TFE_FLOAT64) return strtod(text, NULL) == v;
    return strtof(text, NULL) == (float)v;
}

/* The p-digit decimal next to text ("[-]d.ddde±XX", p digits) in the
 * direction dir (+1 away from zero, -1 toward it), computed on the digits
 * (exact, unlike arithmetic on doubles): 9.99e-3 and 1.00e-2 are
 * neighbours. */
static void neighbour(const char *text, int p, int dir, char *out, size_t n) {
    const char *s = text;
    bool neg = *s == '-';
    if (neg) s++;
    uint64_t d = 0, top = 1;
    for (; *s && *s != 'e'; s++)
        if (*s != '.') d = d * 10 + (uint64_t)(*s - '0');
    int e = atoi(s + 1);
    for (int i = 1; i < p; i++) top *= 10; /* 10^(p-1): the smallest p-digit d */
    if (dir > 0 && ++d == top * 10) d = top, e++;
    else if (dir < 0 && d-- == top) d = top * 10 - 1, e--;
    char digits[32];
    snprintf(digits, sizeof digits, "%llu", (unsigned long long)d);
    snprintf(out, n, "%s%c%s%se%+03d", neg ? "-" : "", digits[0], p > 1 ? "." : "", digits + 1, e);
}

void format_float_shortest(double v, tfe_dtype dt, char *buf, size_t n) {
    if (v != v) {
        snprintf(buf, n, "nan");
        return;
    }
    if (isinf(v)) {
        snprintf(buf, n, v < 0 ? "-inf" : "inf");
        return;
    }
    if (v == 0) {
        snprintf(buf, n, signbit(v) ? "-0.0" : "0.0");
        return;
    }
    /* the half types have digits of their own (NumPy prints float16(0.1) as
     * 0.1): the shortest that read back, rounded to the dtype, to v */
    bool half = dt == TFE_FLOAT16 || dt == TFE_BFLOAT16;
    bool f32 = dt != TFE_FLOAT64 && !half;
    if (f32) v = (float)v; /* the digits of the float32 value itself */
    uint16_t hv = dt == TFE_FLOAT16 ? kn_f64_to_half(v) : dt == TFE_BFLOAT16 ? kn_f64_to_bf16(v) : 0;
    char tmp[64];
    int maxp = f32 ? 9 : 17;
    for (int p = 1; p <= maxp; p++) {
        snprintf(tmp, sizeof tmp, "%.*e", p - 1, v);
        if (reads_back(tmp, v, dt, hv)) break;
        /* the nearest p digits miss, but at a power of two the values above
         * are twice as far apart as those below, and the p-digit number on
         * the other side of v can still read back (float16 2^-6 = 0.015625
         * is 0.01563, as NumPy and Python's repr print it) */
        if (p < maxp) {
            char alt[64];
            neighbour(tmp, p, fabs(strtod(tmp, NULL)) > fabs(v) ? -1 : 1, alt, sizeof alt);
            if (reads_back(alt, v, dt, hv)) {
                memcpy(tmp, alt, sizeof alt);
                break;
            }
        }
    }
    /* tmp is [-]d[.ddd]e±XX: split into sign, digits, exponent */
    char digits[32];
    int nd = 0, exp10;
    const char *s = tmp;
    bool neg = *s == '-';
    if (neg) s++;
    for (; *s && *s != 'e'; s++)
        if (*s != '.') digits[nd++] = *s;
    exp10 = atoi(s + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    digits[nd] = 0;
    char out[64], *o = out;
    if (neg) *o++ = '-';
    if (exp10 < -4 || exp10 >= 16) {
        *o++ = digits[0];
        if (nd > 1) {
            *o++ = '.';
            memcpy(o, digits + 1, (size_t)nd - 1);
            o += nd - 1;
        }
        o += sprintf(o, "e%c%02d", exp10 < 0 ? '-' : '+', exp10 < 0 ? -exp10 : exp10);
    } else if (exp10 < 0) {
        *o++ = '0';
        *o++ = '.';
        for (int i = 0; i < -exp10 - 1; i++) *o++ = '0';
        memcpy(o, digits, (size_t)nd);
        o += nd;
    } else {
        for (int i = 0; i <= exp10; i++) *o++ = i < nd ? digits[i] : '0';
        *o++ = '.';
        if (nd > exp10 + 1) {
            memcpy(o, digits + exp10 + 1, (size_t)(nd - exp10 - 1));
            o += nd - exp10 - 1;
        } else *o++ = '0';
    }
    *o = 0;
    snprintf(buf, n, "%s", out);
}

static void format_elem(const tfe_tensor *t, const char *p, char *buf, size_t n) {
    switch (t->dtype) {
    case TFE_BOOL: snprintf(buf, n, "%s", *(const uint8_t *)p ? "true" : "false"); break;
    case TFE_INT32:
    case TFE_INT64: snprintf(buf, n, "%lld", (long long)kn_load_i64(p, t->dtype)); break;
    case TFE_FLOAT32: case TFE_FLOAT64: case TFE_FLOAT16: case TFE_BFLOAT16: case TFE_NDTYPES:
    default: format_float_shortest(kn_load_f64(p, t->dtype), t->dtype, buf, n); break;
    }
}

typedef struct sbuf { char *s; size_t len, cap; } sbuf;

static void put(sbuf *b, const char *s, size_t n) {
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (b->len + n + 1 > cap) cap *= 2;
        b->s = xrealloc(b->s, cap);
        b->cap = cap;
    }
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = 0;
}
static void puts_(sbuf *b, const char *s) { put(b, s, strlen(s)); }

typedef struct pctx {
    const tfe_tensor *t;
    bool summarise;
    int width;
    sbuf out;
} pctx;

static bool shown(const pctx *c, int axis, int64_t i) {
    int64_t d = c->t->shape[axis];
    return !c->summarise || d <= 2 * EDGE || i < EDGE || i >= d - EDGE;
}

/* pass 1 (out == NULL semantics via measure): widest shown element */
static void measure(pctx *c, int axis, const char *p) {
    const tfe_tensor *t = c->t;
    for (int64_t i = 0; i < t->shape[axis]; i++) {
        if (!shown(c, axis, i)) {
            i = t->shape[axis] - EDGE - 1;
            continue;
        }
        const char *q = p + i * t->strides[axis];
        if (axis == t->rank - 1) {
            char buf[64];
            format_elem(t, q, buf, sizeof buf);
            int w = (int)strlen(buf);
            if (w > c->width) c->width = w;
        } else measure(c, axis + 1, q);
    }
}

static void emit(pctx *c, int axis, const char *p) {
    const tfe_tensor *t = c->t;
    char sep[TFE_MAX_RANK + TFE_MAX_RANK + 4];
    int k = 0;
    sep[k++] = ',';
    if (axis == t->rank - 1) sep[k++] = ' ';
    else {
        for (int i = 0; i < t->rank - axis - 1; i++) sep[k++] = '\n';
        for (int i = 0; i <= axis; i++) sep[k++] = ' ';
    }
    sep[k] = 0;
    puts_(&c->out, "[");
    for (int64_t i = 0; i < t->shape[axis]; i++) {
        if (i) puts_(&c->out, sep);
        if (!shown(c, axis, i)) {
            puts_(&c->out, "...");
            i = t->shape[axis] - EDGE - 1;
            continue;
        }
        const char *q = p + i * t->strides[axis];
        if (axis == t->rank - 1) {
            char buf[64];
            format_elem(t, q, buf, sizeof buf);
            for (int w = (int)strlen(buf); w < c->width; w++) puts_(&c->out, " ");
            puts_(&c->out, buf);
        } else emit(c, axis + 1, q);
    }
    puts_(&c->out, "]");
}

char *tensor_to_string(const tfe_tensor *t) {
    if (t->node && tfe_value_read_hook && tfe_value_read_hook(t)) return xstrdup("<traced tensor>");
    pctx c = {.t = t, .summarise = tensor_numel(t) > THRESHOLD};
    if (t->rank == 0) {
        char buf[64];
        format_elem(t, tensor_data(t), buf, sizeof buf);
        return xstrdup(buf);
    }
    if (tensor_numel(t) == 0) return xstrdup("[]");
    measure(&c, 0, tensor_data(t));
    emit(&c, 0, tensor_data(t));
    return c.out.s;
}
