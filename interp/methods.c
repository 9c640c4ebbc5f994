/* methods.c — tensor methods and properties: `x.f(args)` calls the builtin
 * `f(x, args)`. The one table of which builtins are tensor methods (a new
 * method is one line here), the names the REPL completes, and the
 * "no such field" error with its did-you-mean. */
#include <string.h>
#include "interp/internal.h"
#include "util/xalloc.h"

/* method name -> the builtin it calls with the tensor as first argument.
 * Aliases (astype) name another builtin. Keep the names short and NumPy's /
 * PyTorch's; a builtin whose first parameter is not the tensor has no place
 * here. */
static const struct { const char *method, *builtin; } methods[] = {
    /* reductions */
    {"sum", "sum"}, {"mean", "mean"}, {"prod", "prod"}, {"max", "max"}, {"min", "min"},
    {"any", "any"}, {"all", "all"}, {"logsumexp", "logsumexp"}, {"var", "var"}, {"std", "std"},
    {"argmax", "argmax"}, {"argmin", "argmin"},
    /* elementwise */
    {"neg", "neg"}, {"abs", "abs"}, {"sign", "sign"}, {"exp", "exp"}, {"log", "log"},
    {"log1p", "log1p"}, {"sqrt", "sqrt"}, {"rsqrt", "rsqrt"}, {"sin", "sin"}, {"cos", "cos"},
    {"tanh", "tanh"}, {"sigmoid", "sigmoid"}, {"relu", "relu"}, {"gelu", "gelu"},
    {"softplus", "softplus"}, {"floor", "floor"}, {"ceil", "ceil"}, {"round", "round"},
    {"isnan", "isnan"}, {"isfinite", "isfinite"}, {"logical_not", "logical_not"},
    {"pow", "pow"}, {"maximum", "maximum"}, {"minimum", "minimum"}, {"clip", "clip"},
    {"matmul", "matmul"},
    /* dtype, shape, device */
    {"cast", "cast"}, {"astype", "cast"}, {"reshape", "reshape"}, {"flatten", "flatten"},
    {"transpose", "transpose"}, {"expand_dims", "expand_dims"}, {"squeeze", "squeeze"},
    {"broadcast_to", "broadcast_to"}, {"tile", "tile"}, {"split", "split"},
    {"softmax", "softmax"}, {"log_softmax", "log_softmax"}, {"stop_gradient", "stop_gradient"},
    {"item", "item"}, {"to", "to"},
    /* PyTorch's names of shape facts (its size() is x.shape here) */
    {"numel", "size"}, {"dim", "rank"},
    /* the library ops (sorting, scans, linear algebra) */
    {"tan", "tan"}, {"erf", "erf"}, {"log2", "log2"}, {"log10", "log10"}, {"square", "square"},
    {"cumsum", "cumsum"}, {"cumprod", "cumprod"}, {"sort", "sort"}, {"argsort", "argsort"},
    {"topk", "topk"}, {"unique", "unique"}, {"searchsorted", "searchsorted"},
    {"isclose", "isclose"}, {"allclose", "allclose"},
    {"outer", "outer"}, {"diag", "diag"}, {"trace", "trace"}, {"tril", "tril"}, {"triu", "triu"},
    {"norm", "norm"}, {"inv", "inv"}, {"det", "det"}, {"cholesky", "cholesky"},
    /* host values: NumPy's nested lists */
    {"tolist", "tolist"},
};

/* Properties: tensor_getattr (builtins_tensor.c) computes them. */
static const char *const props[] = {"shape", "dtype", "ndim", "size", "device", "T"};

#define NMETHODS (sizeof methods / sizeof methods[0])
#define NPROPS (sizeof props / sizeof props[0])

const char *const *interp_tensor_attr_names(void)
{
    static const char *names[NPROPS + NMETHODS + 1];
    if (!names[0]) {
        size_t k = 0;
        for (size_t i = 0; i < NPROPS; i++) names[k++] = props[i];
        for (size_t i = 0; i < NMETHODS; i++) names[k++] = methods[i].method;
        names[k] = NULL;
    }
    return names;
}

int tensor_method(Interp *I, Value self, const char *name, Value *out)
{
    for (size_t i = 0; i < NMETHODS; i++) {
        if (strcmp(methods[i].method, name)) continue;
        int k = builtin_index(I, methods[i].builtin);
        if (k < 0 || I->builtin_vals[k].kind != V_BUILTIN) return 1;
        const Builtin *b = (const Builtin *)I->builtin_vals[k].u.o;
        Value m = builtin_new(b->name, b->fn, b->data);
        Builtin *mb = (Builtin *)m.u.o;
        mb->effect = b->effect;
        mb->unstageable = b->unstageable;
        value_incref(self);
        mb->self = self;
        *out = m;
        return 0;
    }
    return 1;
}

/* Edit distance, capped (names are short). */
static int edit_distance(const char *a, const char *b)
{
    size_t n = strlen(a), m = strlen(b);
    if (n > 40 || m > 40) return 99;
    int d[41][41];
    for (size_t i = 0; i <= n; i++) d[i][0] = (int)i;
    for (size_t j = 0; j <= m; j++) d[0][j] = (int)j;
    for (size_t i = 1; i <= n; i++)
        for (size_t j = 1; j <= m; j++) {
            int c = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
            if (d[i - 1][j] + 1 < c) c = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < c) c = d[i][j - 1] + 1;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] && d[i - 2][j - 2] + 1 < c)
                c = d[i - 2][j - 2] + 1; /* a transposition */
            d[i][j] = c;
        }
    return d[n][m];
}

const char *tensor_attr_suggest(const char *name)
{
    const char *const *names = interp_tensor_attr_names();
    const char *best = NULL;
    int bd = (int)strlen(name) <= 3 ? 1 : 2; /* farther is no longer a typo */
    for (int i = 0; names[i]; i++) {
        int d = edit_distance(name, names[i]);
        if (d <= bd && (!best || d < bd)) { best = names[i]; bd = d; }
    }
    return best;
}

/* PyTorch's and NumPy's names of tensor methods that tfe spells otherwise:
 * the error says the tfe spelling (a near name such as 'long' -> 'log' would
 * mislead). */
static const struct { const char *name, *hint; } habits[] = {
    {"unsqueeze", "x.expand_dims(axis)"},
    {"view", "x.reshape(...)"},
    {"permute", "x.transpose(...)"},
    {"float", "x.astype(float32)"},
    {"double", "x.astype(float64)"},
    {"half", "x.astype(float16)"},
    {"long", "x.astype(int64)"},
    {"int", "x.astype(int32)"},
    {"bool", "x.astype(bool)"},
    {"type", "x.astype(dtype)"},
    {"detach", "x.stop_gradient() (or use x: only a tape records gradients)"},
    {"clone", "x itself: tensors are values, an operation never changes its input"},
    {"copy", "x itself: tensors are values, an operation never changes its input"},
    {"numpy", "x itself: a tensor is already an array"},
    {"cpu", "x.to(\"cpu:0\")"},
    {"cuda", "x.to(\"gpu:0\")"},
    {"backward", "with tape() as t { ... } then t.gradient(loss, w)"},
    {"mm", "x @ y"},
    {"dot", "x @ y"},
    {"nelement", "x.size"},
    {"amax", "x.max(...)"},
    {"amin", "x.min(...)"},
    {"chunk", "x.split(n)"},
    {"ravel", "x.flatten()"},
    {"clamp", "x.clip(lo, hi)"},
    {"requires_grad", "variable(x) for a trainable tensor, or t.watch(x) under a tape"},
    {"grad", "t.gradient(loss, x) from a tape"},
};

const char *tensor_attr_habit(const char *name)
{
    for (size_t i = 0; i < sizeof habits / sizeof *habits; i++)
        if (!strcmp(habits[i].name, name)) return habits[i].hint;
    return NULL;
}
