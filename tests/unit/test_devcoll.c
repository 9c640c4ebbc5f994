/* tests/unit/test_devcoll.c — collectives on device memory (tensor/device.h,
 * tfe_device_allreduce/broadcast/allgather; docs/distributed.md, "Devices:
 * NCCL"): every element type and reduction, broadcast from each root,
 * allgather, on buffers of gpu:0, checked against the values the ranks sent.
 * With a GPU (and NCCL) they go through NCCL, then again through the host
 * (TFE_NCCL=0's path); without one, on the pretend device (TFE_FAKE_GPU=1),
 * whose device path stands for NCCL (dist/comm.h on its host memory), then
 * through host copies. A CUDA build with NCCL also checks, without a device,
 * that NCCL loads and has every function gpu/nccl.c needs.
 * tests/dev_coll.sh runs it as one process and under mpirun -np 2 (the
 * pretend device: one GPU cannot hold two NCCL ranks). */
#include "config.h"
#include "dist/comm.h"
#include "tensor/base.h"
#include "tensor/device.h"
#include "tests/unit/check.h"
#ifdef HAVE_CUDA
#include "gpu/gpu.h"
#endif
#ifdef HAVE_NCCL
#include <nccl.h>
#endif

#include <math.h>
#include <stdint.h>
#include <string.h>

#ifdef HAVE_CUDA
void tfe_gpu_register(void);
const tfe_backend *tfe_gpu_probe(void);
#endif

enum { N = 5, MAXR = 8 };
static int rank, size;
static const tfe_backend *be;

#define OK(cond) CHECK(cond, "rank %d: %s", rank, tfe_error_msg())

/* rank r's value at element i: small integers (exact in every type, summed
 * in any order), distinct per rank, of both signs */
static double contrib(int r, int i) { return (double)((r + 1) * (i + 2) - 3 * (r % 2)); }

static void put(dist_type t, void *p, int i, double v) {
    switch (t) {
    case DIST_U8: ((uint8_t *)p)[i] = (uint8_t)fabs(v); break;
    case DIST_I32: ((int32_t *)p)[i] = (int32_t)v; break;
    case DIST_I64: ((int64_t *)p)[i] = (int64_t)v; break;
    case DIST_F32: ((float *)p)[i] = (float)v; break;
    case DIST_F64: ((double *)p)[i] = v; break;
    case DIST_F16: ((_Float16 *)p)[i] = (_Float16)v; break;
    case DIST_BF16: { /* small integers: the top half of the float's bits is exact */
        float f = (float)v;
        uint32_t u;
        memcpy(&u, &f, 4);
        ((uint16_t *)p)[i] = (uint16_t)(u >> 16);
        break;
    }
    }
}

static double get(dist_type t, const void *p, int i) {
    switch (t) {
    case DIST_U8: return ((const uint8_t *)p)[i];
    case DIST_I32: return ((const int32_t *)p)[i];
    case DIST_I64: return (double)((const int64_t *)p)[i];
    case DIST_F32: return ((const float *)p)[i];
    case DIST_F64: return ((const double *)p)[i];
    case DIST_F16: return (double)((const _Float16 *)p)[i];
    case DIST_BF16: {
        uint32_t u = (uint32_t)((const uint16_t *)p)[i] << 16;
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    }
    return NAN;
}

static double value(dist_type t, int r, int i) { return t == DIST_U8 ? fabs(contrib(r, i)) : contrib(r, i); }

/* a device buffer holding host's n bytes */
static void *on_device(const void *host, size_t n) {
    void *d = be->alloc(1, n);
    REQUIRE(d != NULL, "alloc on gpu:0: %s", tfe_error_msg());
    if (host) REQUIRE(be->copy(1, d, 0, host, n) == 0, "copy to gpu:0: %s", tfe_error_msg());
    return d;
}

static void back(void *host, const void *d, size_t n) {
    REQUIRE(be->copy(0, host, 1, d, n) == 0, "copy from gpu:0: %s", tfe_error_msg());
}

static void test_allreduce(void) {
    for (int t = DIST_U8; t <= DIST_BF16; t++) {
        size_t esz = dist_type_size((dist_type)t);
        for (int op = DIST_SUM; op <= DIST_MIN; op++) {
            char h[N * 8], out[N * 8];
            for (int i = 0; i < N; i++) put((dist_type)t, h, i, value((dist_type)t, rank, i));
            void *d = on_device(h, N * esz);
            OK(tfe_device_allreduce(1, d, N, (dist_type)t, (dist_op)op) == 0);
            back(out, d, N * esz);
            for (int i = 0; i < N; i++) {
                double want = value((dist_type)t, 0, i);
                for (int r = 1; r < size; r++) {
                    double v = value((dist_type)t, r, i);
                    want = op == DIST_SUM ? want + v : op == DIST_MAX ? fmax(want, v) : fmin(want, v);
                }
                CHECK(get((dist_type)t, out, i) == want, "rank %d: type %d op %d [%d]: %g, want %g", rank, t, op, i,
                      get((dist_type)t, out, i), want);
            }
            be->free(1, d, N * esz);
        }
    }
    OK(tfe_device_allreduce(1, NULL, 0, DIST_F32, DIST_SUM) == 0); /* nothing to send */
}

static void test_broadcast_allgather(void) {
    for (int root = 0; root < size; root++) {
        int64_t v[2] = {rank * 100 + 7, -rank}, out[2];
        void *d = on_device(v, sizeof v);
        OK(tfe_device_broadcast(1, d, sizeof v, root) == 0);
        back(out, d, sizeof out);
        CHECK(out[0] == root * 100 + 7 && out[1] == -root, "rank %d: broadcast from %d: %lld %lld", rank, root,
              (long long)out[0], (long long)out[1]);
        be->free(1, d, sizeof v);
    }
    float mine[3] = {(float)rank, 0.5f * (float)rank, -1.0f}, all[3 * MAXR];
    REQUIRE(size <= MAXR, "at most %d ranks", MAXR);
    void *ds = on_device(mine, sizeof mine), *dr = on_device(NULL, sizeof mine * (size_t)size);
    OK(tfe_device_allgather(1, ds, sizeof mine, dr) == 0);
    back(all, dr, sizeof mine * (size_t)size);
    for (int r = 0; r < size; r++)
        CHECK(all[3 * r] == (float)r && all[3 * r + 1] == 0.5f * (float)r && all[3 * r + 2] == -1.0f,
              "rank %d: allgather, rank %d's part: %g %g %g", rank, r, all[3 * r], all[3 * r + 1], all[3 * r + 2]);
    be->free(1, ds, sizeof mine);
    be->free(1, dr, sizeof mine * (size_t)size);
}

int main(int argc, char **argv) {
    dist_start(&argc, &argv);
    rank = dist_rank();
    size = dist_size();
    OK(tfe_device_coll_path(0) == 0); /* cpu:0: MPI */
#ifdef HAVE_NCCL
    /* no device needed: the library loads, with every function nccl.c uses,
     * and is the ABI the header describes (ncclGetLastError: 2.13) */
    int v = gpu_nccl_version();
    CHECK(v > 0, "%s", tfe_error_msg());
    CHECK(v / 10000 == NCCL_MAJOR && v >= 21300, "NCCL %d loaded, built against %d", v, NCCL_VERSION_CODE);
    if (rank == 0) printf("test_devcoll: NCCL %d.%d.%d loads\n", v / 10000, v / 100 % 100, v % 100);
#endif
    bool gpu = false;
#ifdef HAVE_CUDA
    const char *fake = getenv("TFE_FAKE_GPU");
    if (!(fake && *fake == '1')) gpu = tfe_gpu_probe() != NULL;
    tfe_gpu_register();
#endif
    if (!gpu) setenv("TFE_FAKE_GPU", "1", 1); /* the pretend gpu:0, in host memory */
    REQUIRE(tfe_device_count() >= 2, "no gpu:0");
    be = tfe_device_backend();
    int path = tfe_device_coll_path(1);
    if (rank == 0)
        printf("test_devcoll: %d rank(s), %s, collectives on gpu:0 through %s\n", size,
               gpu ? "a GPU" : "the pretend GPU (TFE_FAKE_GPU=1)",
               path == 1 ? (gpu ? "NCCL" : "its device path") : "host copies and MPI");
    const char *nccl = getenv("TFE_NCCL");
    bool off = nccl && *nccl == '0';
#ifndef HAVE_NCCL
    off = off || gpu; /* a GPU without NCCL: the host */
#endif
    OK(path == !off);
    test_allreduce();
    test_broadcast_allgather();
    if (path == 1) { /* the host path of the same device: TFE_NCCL=0 */
        setenv("TFE_NCCL", "0", 1);
        OK(tfe_device_coll_path(1) == 0);
        if (rank == 0) printf("test_devcoll: again through host copies and MPI (TFE_NCCL=0)\n");
        test_allreduce();
        test_broadcast_allgather();
    }
    dist_stop();
    return check_done("test_devcoll");
}
