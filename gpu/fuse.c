/* fuse.c — a fused elementwise group (tensor/fused.h) as one CUDA kernel:
 * the register program becomes CUDA C (one thread per output element, a
 * grid-stride loop, registers as local floats), NVRTC compiles it to PTX, and
 * the CUDA driver API loads and launches it. NVRTC and the driver are loaded
 * with dlopen on first use (linking them would cost every run of tfe, GPU or
 * not). Kernels are cached by program: one NVRTC compile per distinct
 * program, one module load per program and device.
 *
 * Numerics: each instruction is its op's formula in tensor/elem.def, the
 * text the CPU loops and the fused VM are compiled from, with CUDA's libdevice for expf, logf, tanhf,
 * ...; no fast-math, and --fmad=false so that a mul feeding an add is not
 * contracted into one FMA (the CPU rounds twice). Results match the CPU
 * within libm ulps: bitwise for + - * / sqrt and the NaN rules.
 *
 * Supported: float32 programs without a final reduction, at most
 * GPU_FUSED_MAX_IN inputs; the rest stay on the CPU (gpu_fused_run
 * answers 1). */
#include <dlfcn.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cuda.h>
#include <nvrtc.h>

#include "config.h"
#include "gpu/gpu.h"
#include "tensor/fused.h"
#include "tensor/base.h"
#include "util/xalloc.h"

enum { MAXDEV = 16, BLOCK = 256, MAX_BLOCKS = 65536 };

/* The kernel's one argument, passed by value. The CUDA C side is printed
 * from the same sizes (struct_source); the layouts agree field by field
 * (8-byte integers and pointers, natural alignment on both sides). */
typedef struct gpu_fargs {
    int64_t n;                                      /* output elements */
    int32_t rank, ninputs;
    int64_t shape[GPU_MAX_RANK];                    /* output shape, axes merged */
    const float *in[GPU_FUSED_MAX_IN];              /* device pointers; NULL: the value v[k] */
    float v[GPU_FUSED_MAX_IN];                      /* 0-d cpu:0 inputs, by value */
    int64_t st[GPU_FUSED_MAX_IN][GPU_MAX_RANK];     /* element strides in out's index space */
    float *out;                                     /* contiguous */
} gpu_fargs;
_Static_assert(sizeof(gpu_fargs) == 8 + 8 + 8 * GPU_MAX_RANK + 8 * GPU_FUSED_MAX_IN + 4 * GPU_FUSED_MAX_IN +
                                        8 * GPU_FUSED_MAX_IN * GPU_MAX_RANK + 8,
               "gpu_fargs has padding the CUDA C struct would not have");

/* ---- CUDA C ------------------------------------------------------------------------ */

/* Why the GPU has no kernel for p, or NULL when it has one. */
static const char *unsupported(const tfe_fprog *p) {
    if (p->dtype != TFE_FLOAT32) return "not float32";
    if (p->red != TFE_FRED_NONE) return "a final reduction";
    if (p->ninputs > GPU_FUSED_MAX_IN) return "too many inputs";
    return NULL;
}

/* A growing string (xrealloc exits cleanly on out of memory). */
typedef struct sbuf {
    char *s;
    size_t len, cap;
} sbuf;

static void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf *b, const char *fmt, ...) {
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->s ? b->s + b->len : NULL, b->s ? b->cap - b->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0) return;
        if (b->s && b->len + (size_t)n < b->cap) {
            b->len += (size_t)n;
            return;
        }
        b->cap = (b->cap + (size_t)n + 1) * 2;
        b->s = xrealloc(b->s, b->cap);
    }
}

/* The formulas: tensor/elem.def's text, stringified by the preprocessor, so
 * the kernel computes the characters the CPU loops are compiled from. The
 * prelude defines T and F (float32: F(exp) is expf) and the helpers; each op
 * is a function tfe_ID(x) or tfe_ID(x, y), emitted when the program uses it. */
static const char prelude[] =
    "#define T float\n"
    "#define F(fn) fn##f\n"
#define ELEM_HELPER(NAME, PARAMS, ...) \
    "static __device__ __forceinline__ T F(" #NAME ")" #PARAMS " " #__VA_ARGS__ "\n"
#include "tensor/elem.def"
    ;
static const char *const op_source[TFE_NOPS] = {
#define ELEM_UNARY(ID, COST, EXPR) \
    [OP_##ID] = "static __device__ __forceinline__ T tfe_" #ID "(T x) { return " #EXPR "; }\n",
#define ELEM_BINARY(ID, COST, EXPR) \
    [OP_##ID] = "static __device__ __forceinline__ T tfe_" #ID "(T x, T y) { return " #EXPR "; }\n",
#include "tensor/elem.def"
};
static const char *const op_id[TFE_NOPS] = {
#define ELEM_UNARY(ID, COST, EXPR) [OP_##ID] = #ID,
#define ELEM_BINARY(ID, COST, EXPR) [OP_##ID] = #ID,
#include "tensor/elem.def"
};

/* A float constant as its bits: exact, and inf and NaN need no spelling. */
static void put_float(sbuf *b, float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    sb_printf(b, "__int_as_float(0x%08" PRIx32 ")", u);
}

/* The expression instruction c computes, over registers rA and rB. */
static void put_expr(sbuf *b, const tfe_finstr *c) {
    if (c->op == FOP_LOAD) sb_printf(b, "a.in[%d] ? a.in[%d][o%d] : a.v[%d]", c->input, c->input, c->input, c->input);
    else if (c->op == FOP_CONST) put_float(b, (float)c->imm);
    else if (tfe_fop_nargs(c->op) == 1) sb_printf(b, "tfe_%s(r%d)", op_id[c->op], c->a);
    else sb_printf(b, "tfe_%s(r%d, r%d)", op_id[c->op], c->a, c->b); /* validated: binary */
}

char *gpu_fused_source(const tfe_fprog *p, const char *name) {
    const char *why = unsupported(p);
    if (why) {
        tfe_error_set("fused: no GPU kernel for this program (%s)", why);
        return NULL;
    }
    tfe_fkernel *vm = tfe_fused_compile(p); /* the VM's checks: registers, inputs, ops */
    if (!vm) return NULL;
    tfe_fused_free(vm);

    bool *used = xcalloc((size_t)(p->ninputs ? p->ninputs : 1), sizeof *used);
    for (int i = 0; i < p->ninstr; i++)
        if (p->code[i].op == FOP_LOAD) used[p->code[i].input] = true;

    sbuf b = {0};
    sb_printf(&b, "/* tfe fused group: %d instructions, %d inputs, %d registers (gpu/fuse.c) */\n",
              p->ninstr, p->ninputs, p->nregs);
    sb_printf(&b,
              "typedef struct tfe_fargs {\n"
              "    long long n;\n"
              "    int rank, ninputs;\n"
              "    long long shape[%d];\n"
              "    const float *in[%d];\n"
              "    float v[%d];\n"
              "    long long st[%d][%d];\n"
              "    float *out;\n"
              "} tfe_fargs;\n",
              GPU_MAX_RANK, GPU_FUSED_MAX_IN, GPU_FUSED_MAX_IN, GPU_FUSED_MAX_IN, GPU_MAX_RANK);
    sb_printf(&b, "%s", prelude);
    bool *emitted = xcalloc(TFE_NOPS, sizeof *emitted);
    for (int i = 0; i < p->ninstr; i++) {
        int op = p->code[i].op;
        if (op < TFE_NOPS && !emitted[op]) {
            emitted[op] = true;
            sb_printf(&b, "%s", op_source[op]);
        }
    }
    free(emitted);
    sb_printf(&b,
              "extern \"C\" __global__ void %s(const tfe_fargs a) {\n"
              "    const long long step = (long long)gridDim.x * blockDim.x;\n"
              "    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < a.n; i += step) {\n",
              name);
    /* where each input's element is: one multiply on one axis (the usual
     * case once the host has merged axes), else the multi-index */
    bool any = false;
    for (int k = 0; k < p->ninputs; k++) {
        if (!used[k]) continue;
        sb_printf(&b, "%s o%d = 0", any ? "," : "        long long", k);
        any = true;
    }
    if (any) {
        sb_printf(&b, ";\n        if (a.rank == 1) {\n");
        for (int k = 0; k < p->ninputs; k++)
            if (used[k]) sb_printf(&b, "            o%d = i * a.st[%d][0];\n", k, k);
        sb_printf(&b,
                  "        } else {\n"
                  "            long long rem = i;\n"
                  "            for (int d = a.rank - 1; d >= 0; d--) {\n"
                  "                long long q = rem / a.shape[d], j = rem - q * a.shape[d];\n"
                  "                rem = q;\n");
        for (int k = 0; k < p->ninputs; k++)
            if (used[k]) sb_printf(&b, "                o%d += j * a.st[%d][d];\n", k, k);
        sb_printf(&b, "            }\n        }\n");
    }
    sb_printf(&b, "        float");
    for (int r = 0; r < p->nregs; r++) sb_printf(&b, "%s r%d = 0.0f", r ? "," : "", r);
    sb_printf(&b, ";\n");
    for (int i = 0; i < p->ninstr; i++) {
        const tfe_finstr *c = &p->code[i];
        sb_printf(&b, "        r%d = ", c->dst);
        put_expr(&b, c);
        if (c->op == FOP_CONST) sb_printf(&b, "; /* const %.9g */\n", (float)c->imm);
        else if (c->op == FOP_LOAD) sb_printf(&b, "; /* load %d */\n", c->input);
        else sb_printf(&b, "; /* %s */\n", tfe_fop_name(c->op));
    }
    sb_printf(&b, "        a.out[i] = r%d;\n    }\n}\n", p->result);
    free(used);
    return b.s;
}

/* ---- NVRTC --------------------------------------------------------------------------- */
static struct {
    bool tried, ok;
    typeof(&nvrtcGetErrorString) error_string;
    typeof(&nvrtcCreateProgram) create;
    typeof(&nvrtcDestroyProgram) destroy;
    typeof(&nvrtcCompileProgram) compile;
    typeof(&nvrtcGetPTXSize) ptx_size;
    typeof(&nvrtcGetPTX) get_ptx;
    typeof(&nvrtcGetProgramLogSize) log_size;
    typeof(&nvrtcGetProgramLog) get_log;
} nv;

static int load_nvrtc(void) {
    if (!nv.tried) {
        nv.tried = true;
        void *h = dlopen(TFE_NVRTC_LIB, RTLD_NOW | RTLD_LOCAL);
        if (!h) h = dlopen("libnvrtc.so", RTLD_NOW | RTLD_LOCAL);
        if (h) {
            nv.error_string = (typeof(nv.error_string))dlsym(h, "nvrtcGetErrorString");
            nv.create = (typeof(nv.create))dlsym(h, "nvrtcCreateProgram");
            nv.destroy = (typeof(nv.destroy))dlsym(h, "nvrtcDestroyProgram");
            nv.compile = (typeof(nv.compile))dlsym(h, "nvrtcCompileProgram");
            nv.ptx_size = (typeof(nv.ptx_size))dlsym(h, "nvrtcGetPTXSize");
            nv.get_ptx = (typeof(nv.get_ptx))dlsym(h, "nvrtcGetPTX");
            nv.log_size = (typeof(nv.log_size))dlsym(h, "nvrtcGetProgramLogSize");
            nv.get_log = (typeof(nv.get_log))dlsym(h, "nvrtcGetProgramLog");
            nv.ok = nv.error_string && nv.create && nv.destroy && nv.compile && nv.ptx_size && nv.get_ptx &&
                    nv.log_size && nv.get_log;
        }
    }
    if (!nv.ok) tfe_error_set("fused: cannot load NVRTC (%s)", TFE_NVRTC_LIB);
    return nv.ok ? 0 : -1;
}

static uint64_t fnv1a(uint64_t h, const void *p, size_t n) {
    const unsigned char *s = p;
    for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 0x100000001b3ULL;
    return h;
}

/* The program as the numbers that define it (operand fields an op does not
 * read are 0), for the cache key and the hash. */
static int64_t *program_key(const tfe_fprog *p, size_t *n) {
    *n = 8 + (size_t)(p->ninstr > 0 ? p->ninstr : 0) * 6;
    int64_t *k = xmalloc(*n * sizeof *k);
    int64_t *w = k;
    *w++ = p->dtype, *w++ = p->red, *w++ = p->red_axes, *w++ = p->rank;
    *w++ = p->ninputs, *w++ = p->nregs, *w++ = p->ninstr, *w++ = p->result;
    for (int i = 0; i < p->ninstr; i++) {
        const tfe_finstr *c = &p->code[i];
        int na = tfe_fop_nargs(c->op);
        double imm = c->op == FOP_CONST ? c->imm : 0;
        int64_t bits;
        memcpy(&bits, &imm, 8);
        *w++ = c->op, *w++ = c->dst, *w++ = na >= 1 ? c->a : 0, *w++ = na == 2 ? c->b : 0;
        *w++ = c->op == FOP_LOAD ? c->input : 0, *w++ = bits;
    }
    return k;
}

static uint64_t key_hash(const int64_t *k, size_t n) { return fnv1a(0xcbf29ce484222325ULL, k, n * sizeof *k); }

static void kernel_name(uint64_t h, char *buf, size_t n) { snprintf(buf, n, "tfe_fused_%016" PRIx64, h); }

/* NVRTC compile of src to PTX; *log gets the compiler's log (may be empty). */
static int compile_source(const char *src, const char *name, char **ptx, char **log) {
    *ptx = NULL;
    if (log) *log = NULL;
    if (load_nvrtc()) return -1;
    nvrtcProgram prog;
    nvrtcResult r = nv.create(&prog, src, name, 0, NULL, NULL);
    if (r != NVRTC_SUCCESS) {
        tfe_error_set("fused: nvrtcCreateProgram failed: %s", nv.error_string(r));
        return -1;
    }
    /* compute_80 PTX: the driver JITs it for the device (sm_80 and up, the
     * H200 included). No fast-math; --fmad=false: no contraction of a
     * multiply and an add into an FMA, which the CPU does not do. */
    const char *opts[] = {"--gpu-architecture=compute_80", "-default-device", "--fmad=false"};
    r = nv.compile(prog, (int)(sizeof opts / sizeof *opts), opts);
    size_t lsize = 0;
    char *lg = NULL;
    if (nv.log_size(prog, &lsize) == NVRTC_SUCCESS && lsize > 0) {
        lg = xmalloc(lsize + 1);
        if (nv.get_log(prog, lg) != NVRTC_SUCCESS) lg[0] = 0;
        lg[lsize] = 0;
    }
    int rc = -1;
    if (r != NVRTC_SUCCESS) {
        tfe_error_set("fused: NVRTC could not compile kernel %s: %s\n%.2000s", name, nv.error_string(r),
                      lg ? lg : "");
    } else {
        size_t psize = 0;
        nvrtcResult r2 = nv.ptx_size(prog, &psize);
        if (r2 == NVRTC_SUCCESS) {
            *ptx = xmalloc(psize + 1);
            r2 = nv.get_ptx(prog, *ptx);
            (*ptx)[psize] = 0;
        }
        if (r2 != NVRTC_SUCCESS) {
            free(*ptx);
            *ptx = NULL;
            tfe_error_set("fused: nvrtcGetPTX failed for kernel %s: %s", name, nv.error_string(r2));
        } else {
            rc = 0;
        }
    }
    nv.destroy(&prog);
    if (log) *log = lg;
    else free(lg);
    return rc;
}

int gpu_fused_compile(const tfe_fprog *p, char **ptx, char **log) {
    *ptx = NULL;
    if (log) *log = NULL;
    size_t n;
    int64_t *key = program_key(p, &n);
    char name[64];
    kernel_name(key_hash(key, n), name, sizeof name);
    free(key);
    char *src = gpu_fused_source(p, name);
    if (!src) return -1;
    int rc = compile_source(src, name, ptx, log);
    free(src);
    return rc;
}

/* ---- the cache: program -> PTX -> a function per device --------------------------------- */
typedef struct kentry {
    struct kentry *next;
    uint64_t hash;
    int64_t *key;
    size_t nkey;
    char name[64];
    char *ptx;                    /* NULL until compiled */
    bool reported;                /* gpu_fused_check has said it is skipped */
    CUmodule mod[MAXDEV];
    CUfunction fn[MAXDEV];
} kentry;

enum { NBUCKETS = 256 };
static kentry *buckets[NBUCKETS];

/* The entry of p (made on first sight; compiled on the first ptx_of). */
static kentry *entry_of(const tfe_fprog *p) {
    size_t n;
    int64_t *key = program_key(p, &n);
    uint64_t h = key_hash(key, n);
    kentry **slot = &buckets[h % NBUCKETS];
    for (kentry *e = *slot; e; e = e->next)
        if (e->hash == h && e->nkey == n && !memcmp(e->key, key, n * sizeof *key)) {
            free(key);
            return e;
        }
    kentry *e = xcalloc(1, sizeof *e);
    e->hash = h;
    e->key = key;
    e->nkey = n;
    kernel_name(h, e->name, sizeof e->name);
    e->next = *slot;
    *slot = e;
    return e;
}

static const char *ptx_of(kentry *e, const tfe_fprog *p) {
    if (!e->ptx) {
        char *src = gpu_fused_source(p, e->name);
        if (!src) return NULL;
        char *ptx;
        int rc = compile_source(src, e->name, &ptx, NULL);
        free(src);
        if (rc) return NULL;
        e->ptx = ptx;
    }
    return e->ptx;
}

/* $TFE_GPU_FUSED_PTX_DIR: where the check leaves NAME.ptx (for ptxas) */
static void save_ptx(const kentry *e) {
    const char *dir = getenv("TFE_GPU_FUSED_PTX_DIR");
    if (!dir || !*dir) return;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.ptx", dir, e->name);
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(e->ptx, f);
        fclose(f);
    }
}

static int check_one(const tfe_fprog *p, bool show_source, const char *what) {
    kentry *e = entry_of(p);
    if (e->ptx) return 0;
    const char *why = unsupported(p);
    if (why) {
        if (!e->reported) fprintf(stderr, "fused-ptx: skipped %s (%s)\n", e->name, why);
        e->reported = true;
        return 0;
    }
    if (show_source) {
        char *src = gpu_fused_source(p, e->name);
        if (!src) return -1;
        fprintf(stderr, "fused-ptx: source of %s\n%s", e->name, src);
        free(src);
    }
    if (!ptx_of(e, p)) return -1;
    fprintf(stderr, "fused-ptx: ok %s (%s%d instructions, %zu bytes of PTX)\n", e->name, what, p->ninstr,
            strlen(e->ptx));
    save_ptx(e);
    return 0;
}

/* A program with every op once: r0, r1 the inputs, r2 a constant, r3 each
 * op's value, r4 their sum. Graphs never fuse some ops (floordiv, floor,
 * ceil and round have no gradient), so the check compiles this too. */
static int check_every_op(bool show_source) {
    tfe_finstr code[4 + 2 * TFE_NOPS];
    int n = 0;
    code[n++] = (tfe_finstr){.op = FOP_LOAD, .dst = 0, .input = 0};
    code[n++] = (tfe_finstr){.op = FOP_LOAD, .dst = 1, .input = 1};
    code[n++] = (tfe_finstr){.op = FOP_CONST, .dst = 2, .imm = 0.1}; /* rounded to float */
    code[n++] = (tfe_finstr){.op = OP_ADD, .dst = 4, .a = 0, .b = 2};
    for (int f = 0; f < TFE_NOPS; f++) {
        int na = tfe_fop_nargs(f);
        if (na < 1) continue;
        code[n++] = (tfe_finstr){.op = (uint16_t)f, .dst = 3, .a = 0, .b = 1};
        code[n++] = (tfe_finstr){.op = OP_ADD, .dst = 4, .a = 4, .b = 3};
    }
    tfe_fprog p = {.dtype = TFE_FLOAT32, .red = TFE_FRED_NONE, .ninputs = 2, .nregs = 5, .ninstr = n,
                   .code = code, .result = 4};
    return check_one(&p, show_source, "every op, ");
}

/* TFE_GPU_FUSED_PTX_CHECK (tests/gpu_fused_ptx.sh): every distinct program
 * is compiled once and reported on stderr, with its source when asked; the
 * first call also compiles the every-op program. */
int gpu_fused_check(const tfe_fprog *p, bool show_source) {
    static bool every_op_done;
    if (!every_op_done) {
        every_op_done = true;
        if (check_every_op(show_source)) return -1;
    }
    return check_one(p, show_source, "");
}

/* ---- the CUDA driver ------------------------------------------------------------------ */
static struct {
    bool tried, ok;
    typeof(&cuInit) init;
    typeof(&cuGetErrorName) error_name;
    typeof(&cuGetErrorString) error_string;
    typeof(&cuDeviceGet) device_get;
    typeof(&cuDevicePrimaryCtxRetain) ctx_retain;
    typeof(&cuCtxSetCurrent) ctx_set_current;
    typeof(&cuModuleLoadDataEx) module_load;
    typeof(&cuModuleGetFunction) get_function;
    typeof(&cuLaunchKernel) launch;
} cu;
static CUcontext contexts[MAXDEV];

static int load_driver(int dev) {
    if (!cu.tried) {
        cu.tried = true;
        void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL); /* already loaded by cudart */
        if (h) {
            cu.init = (typeof(cu.init))dlsym(h, "cuInit");
            cu.error_name = (typeof(cu.error_name))dlsym(h, "cuGetErrorName");
            cu.error_string = (typeof(cu.error_string))dlsym(h, "cuGetErrorString");
            cu.device_get = (typeof(cu.device_get))dlsym(h, "cuDeviceGet");
            cu.ctx_retain = (typeof(cu.ctx_retain))dlsym(h, "cuDevicePrimaryCtxRetain");
            cu.ctx_set_current = (typeof(cu.ctx_set_current))dlsym(h, "cuCtxSetCurrent");
            cu.module_load = (typeof(cu.module_load))dlsym(h, "cuModuleLoadDataEx");
            cu.get_function = (typeof(cu.get_function))dlsym(h, "cuModuleGetFunction");
            cu.launch = (typeof(cu.launch))dlsym(h, "cuLaunchKernel");
            cu.ok = cu.init && cu.error_name && cu.error_string && cu.device_get && cu.ctx_retain &&
                    cu.ctx_set_current && cu.module_load && cu.get_function && cu.launch &&
                    cu.init(0) == CUDA_SUCCESS;
        }
    }
    if (!cu.ok) tfe_error_set("fused: cannot load the CUDA driver (libcuda.so.1) for gpu:%d", dev - 1);
    return cu.ok ? 0 : -1;
}

/* 0, or -1 with "fused: CALL on gpu:N failed: NAME (reason)" as the error */
static int cu_check(CUresult r, const char *call, int dev) {
    if (r == CUDA_SUCCESS) return 0;
    const char *name = NULL, *msg = NULL;
    if (cu.error_name(r, &name) != CUDA_SUCCESS) name = NULL;
    if (cu.error_string(r, &msg) != CUDA_SUCCESS) msg = NULL;
    tfe_error_set("fused: %s on gpu:%d failed: %s (%s)", call, dev - 1, name ? name : "CUDA error",
                  msg ? msg : "unknown");
    return -1;
}

/* The runtime's context for dev (its primary context) made current for the
 * driver calls: the same context cudart uses, so its stream and memory work. */
static int use_context(gpu_state *g, int dev) {
    if (!contexts[dev]) {
        CUdevice d;
        if (cu_check(cu.device_get(&d, g->ordinal), "cuDeviceGet", dev) ||
            cu_check(cu.ctx_retain(&contexts[dev], d), "cuDevicePrimaryCtxRetain", dev))
            return -1;
    }
    return cu_check(cu.ctx_set_current(contexts[dev]), "cuCtxSetCurrent", dev);
}

static CUfunction function_of(kentry *e, const tfe_fprog *p, int dev) {
    if (e->fn[dev]) return e->fn[dev];
    if (!ptx_of(e, p)) return NULL;
    char errlog[4096] = "";
    CUjit_option opt[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
    void *val[] = {errlog, (void *)(uintptr_t)sizeof errlog};
    CUmodule mod;
    CUresult r = cu.module_load(&mod, e->ptx, 2, opt, val);
    if (r != CUDA_SUCCESS) {
        cu_check(r, "cuModuleLoadDataEx", dev);
        if (errlog[0]) {
            errlog[sizeof errlog - 1] = 0;
            tfe_error_set("%s\n%s", tfe_error_msg(), errlog);
        }
        return NULL;
    }
    CUfunction fn;
    if (cu_check(cu.get_function(&fn, mod, e->name), "cuModuleGetFunction", dev)) return NULL;
    e->mod[dev] = mod;
    e->fn[dev] = fn;
    return fn;
}

/* The kernel's argument: out's shape with size-1 axes dropped and axes
 * merged where every input steps through them as one, and each input's
 * element strides over it (0 on broadcast axes). */
static int make_args(gpu_fargs *a, const tfe_fprog *p, tfe_tensor *const *in, tfe_tensor *out, int dev) {
    memset(a, 0, sizeof *a);
    a->n = tensor_numel(out);
    a->ninputs = p->ninputs;
    a->out = (float *)tensor_data(out);
    int64_t st[GPU_FUSED_MAX_IN][GPU_MAX_RANK];
    for (int k = 0; k < p->ninputs; k++) {
        const tfe_tensor *t = in[k];
        char b1[200], b2[200];
        if (t->dtype != TFE_FLOAT32) {
            tfe_error_set("fused: input %d is %s, the program is float32", k, dtype_name(t->dtype));
            return -1;
        }
        if (!t->storage || (t->storage->device != dev && !(t->storage->device == 0 && t->rank == 0))) {
            tfe_error_set("fused: input %d is not on gpu:%d", k, dev - 1);
            return -1;
        }
        bool ok = t->rank <= out->rank;
        for (int i = 0; ok && i < t->rank; i++) {
            int64_t d = t->shape[i], o = out->shape[out->rank - t->rank + i];
            ok = d == o || d == 1;
        }
        if (!ok) {
            tfe_error_set("fused: input %d of shape %s does not broadcast to %s", k,
                          shape_str(t->rank, t->shape, b1), shape_str(out->rank, out->shape, b2));
            return -1;
        }
        if (t->storage->device == 0) { /* a 0-d cpu:0 value: passed by value */
            a->v[k] = *(const float *)tensor_data(t);
            continue;
        }
        a->in[k] = (const float *)tensor_data(t);
        for (int d = 0; d < out->rank; d++) {
            int td = d - (out->rank - t->rank);
            st[k][d] = td < 0 || t->shape[td] == 1 ? 0 : t->strides[td] / (int64_t)sizeof(float);
        }
    }
    int r = 0;
    for (int d = 0; d < out->rank; d++) {
        int64_t len = out->shape[d];
        if (len == 1) continue;
        bool merge = r > 0;
        for (int k = 0; merge && k < p->ninputs; k++)
            merge = !a->in[k] || a->st[k][r - 1] == st[k][d] * len;
        if (merge) {
            a->shape[r - 1] *= len;
            for (int k = 0; k < p->ninputs; k++)
                if (a->in[k]) a->st[k][r - 1] = st[k][d];
        } else {
            a->shape[r] = len;
            for (int k = 0; k < p->ninputs; k++)
                if (a->in[k]) a->st[k][r] = st[k][d];
            r++;
        }
    }
    a->rank = r; /* 0: one element, every offset 0 */
    return 0;
}

int gpu_fused_run(const tfe_fprog *p, tfe_tensor *const *in, tfe_tensor *out, int dev) {
    if (unsupported(p)) return 1;
    if (out->dtype != TFE_FLOAT32 || !out->storage || out->storage->device != dev || !tensor_is_contiguous(out)) {
        tfe_error_set("fused: the output must be a contiguous float32 tensor on gpu:%d", dev - 1);
        return -1;
    }
    gpu_fargs a;
    if (make_args(&a, p, in, out, dev)) return -1;
    if (a.n == 0) return 0;
    gpu_state *g = gpu_use(dev);
    if (!g || load_driver(dev) || use_context(g, dev)) return -1;
    kentry *e = entry_of(p);
    CUfunction fn = function_of(e, p, dev);
    if (!fn) return -1;
    int64_t blocks = (a.n + BLOCK - 1) / BLOCK;
    if (blocks > MAX_BLOCKS) blocks = MAX_BLOCKS; /* the grid-stride loop does the rest */
    void *params[] = {&a};
    if (cu_check(cu.launch(fn, (unsigned)blocks, 1, 1, BLOCK, 1, 1, 0, (CUstream)g->stream, params, NULL),
                 "cuLaunchKernel", dev))
        return -1;
    /* as every GPU op: wait, so an error is reported here and host reads are safe */
    return gpu_check(cudaStreamSynchronize(g->stream), "fused", "cudaStreamSynchronize", dev);
}
