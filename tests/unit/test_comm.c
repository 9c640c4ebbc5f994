/* tests/unit/test_comm.c — the process group (dist/comm.c) on raw buffers:
 * every element type and reduction, broadcast from each root, allgather,
 * agreement, nonblocking allreduce. Run alone (rank 0 of 1: the collectives
 * are what they mean for one process) and by tests/dist_comm.sh under
 * `mpirun -np 2`, where each rank checks the values the others sent. */
#include "config.h"
#include "dist/comm.h"
#include "tests/unit/check.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

static char err[256];

/* every check names the rank and the last error message */
#define OK(cond) CHECK(cond, "rank %d: %s", dist_rank(), err)

/* the value rank r contributes at element i: distinct per rank and element */
static double contrib(int r, int i) { return (double)((r + 1) * 10 + i) * (r % 2 ? -1 : 1) / 4.0; }

static double expect(int size, int i, dist_op op)
{
    double acc = contrib(0, i);
    for (int r = 1; r < size; r++) {
        double v = contrib(r, i);
        acc = op == DIST_SUM ? acc + v : op == DIST_MAX ? fmax(acc, v) : fmin(acc, v);
    }
    return acc;
}

static void test_allreduce_float(int rank, int size)
{
    enum { N = 5 };
    for (int op = DIST_SUM; op <= DIST_MIN; op++) {
        float f[N]; double d[N]; _Float16 h[N];
        for (int i = 0; i < N; i++) { f[i] = (float)contrib(rank, i); d[i] = contrib(rank, i); h[i] = (_Float16)contrib(rank, i); }
        OK(dist_allreduce(f, N, DIST_F32, op, err, sizeof err) == 0);
        OK(dist_allreduce(d, N, DIST_F64, op, err, sizeof err) == 0);
        OK(dist_allreduce(h, N, DIST_F16, op, err, sizeof err) == 0);
        for (int i = 0; i < N; i++) {
            OK(f[i] == (float)expect(size, i, op));
            OK(d[i] == expect(size, i, op));
            OK((double)h[i] == expect(size, i, op)); /* quarters up to 100: exact in float16 */
        }
        /* bfloat16: 1.5 * rank + 0.25, exact in 8 bits of mantissa */
        uint16_t b[1];
        float bv = 1.5f * (float)rank + 0.25f, be = 0;
        uint32_t u; memcpy(&u, &bv, 4); b[0] = (uint16_t)(u >> 16);
        for (int r = 0; r < size; r++) {
            float v = 1.5f * (float)r + 0.25f;
            be = r == 0 ? v : op == DIST_SUM ? be + v : op == DIST_MAX ? fmaxf(be, v) : fminf(be, v);
        }
        OK(dist_allreduce(b, 1, DIST_BF16, op, err, sizeof err) == 0);
        u = (uint32_t)b[0] << 16; memcpy(&bv, &u, 4);
        OK(bv == be);
    }
}

static void test_allreduce_int(int rank, int size)
{
    int32_t a[3] = {rank, -rank, 7};
    int64_t b[2] = {(int64_t)1 << 40, rank};
    uint8_t c[2] = {1, (uint8_t)(rank == 0)};
    OK(dist_allreduce(a, 3, DIST_I32, DIST_SUM, err, sizeof err) == 0);
    OK(dist_allreduce(b, 2, DIST_I64, DIST_MAX, err, sizeof err) == 0);
    OK(dist_allreduce(c, 2, DIST_U8, DIST_MIN, err, sizeof err) == 0);
    OK(a[0] == size * (size - 1) / 2 && a[1] == -a[0] && a[2] == 7 * size);
    OK(b[0] == (int64_t)1 << 40 && b[1] == size - 1);
    OK(c[0] == 1 && c[1] == (size == 1));
}

static void test_broadcast_gather(int rank, int size)
{
    for (int root = 0; root < size; root++) {
        int64_t v[2] = {rank * 100, rank};
        OK(dist_broadcast(v, sizeof v, root, err, sizeof err) == 0);
        OK(v[0] == root * 100 && v[1] == root);
    }
    int64_t v = 1;
    OK(dist_broadcast(&v, sizeof v, size, err, sizeof err) == -1);
    OK(strstr(err, "is not a rank of this job") != NULL);
    int32_t mine[2] = {rank, rank * rank}, all[2 * 8];
    OK(size <= 8);
    OK(dist_allgather(mine, sizeof mine, all, err, sizeof err) == 0);
    for (int r = 0; r < size; r++) OK(all[2 * r] == r && all[2 * r + 1] == r * r);
}

static void test_agree_and_nonblocking(int rank, int size)
{
    OK(dist_agree(0x1234u, err, sizeof err) == 1);
    OK(dist_agree(rank == 0 ? 5u : 6u, err, sizeof err) == (size == 1));
    float x[1000];
    for (int i = 0; i < 1000; i++) x[i] = (float)(rank + i);
    dist_request *r = dist_iallreduce(x, 1000, DIST_F32, DIST_SUM, err, sizeof err);
    OK(r != NULL);
    dist_progress();
    OK(dist_wait(r, err, sizeof err) == 0);
    for (int i = 0; i < 1000; i++) OK(x[i] == (float)(size * i + size * (size - 1) / 2));
    OK(dist_barrier(err, sizeof err) == 0);
}

int main(int argc, char **argv)
{
    dist_start(&argc, &argv);
    int rank = dist_rank(), size = dist_size();
    OK(rank >= 0 && rank < size);
    test_allreduce_float(rank, size);
    test_allreduce_int(rank, size);
    test_broadcast_gather(rank, size);
    test_agree_and_nonblocking(rank, size);
    double t0 = dist_time();
    OK(dist_barrier(err, sizeof err) == 0);
    OK(dist_time() >= t0);
    dist_stop();
    return check_done("test_comm");
}
