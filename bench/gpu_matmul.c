/* gpu_matmul.c — cuBLAS called directly: the fp32 GEMM throughput that
 * bench/gpu.sh compares tfe's matmul with. Usage: gpu_matmul N [ITERS]
 * prints "CUBLAS_FP32 N TFLOPS" (C = A B, N x N, row-major data, FP32 math,
 * the same cublasSgemm call shape gpu/matmul.c makes). Build (bench/gpu.sh):
 *   gcc -O2 -I$CUDA/include bench/gpu_matmul.c -L$CUDA/lib64 -lcublas -lcudart */
#include <stdio.h>
#include <stdlib.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
    fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_)); return 1; } } while (0)
#define CB(x) do { cublasStatus_t s_ = (x); if (s_ != CUBLAS_STATUS_SUCCESS) { \
    fprintf(stderr, "%s: %s\n", #x, cublasGetStatusString(s_)); return 1; } } while (0)

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 4096, iters = argc > 2 ? atoi(argv[2]) : 20;
    size_t bytes = (size_t)n * n * sizeof(float);
    float *a, *b, *c;
    CK(cudaMalloc((void **)&a, bytes));
    CK(cudaMalloc((void **)&b, bytes));
    CK(cudaMalloc((void **)&c, bytes));
    CK(cudaMemset(a, 0, bytes));
    CK(cudaMemset(b, 0, bytes));
    cublasHandle_t h;
    CB(cublasCreate(&h));
    const float one = 1.0f, zero = 0.0f;
    for (int i = 0; i < 3; i++) /* warm-up (heuristics, clocks) */
        CB(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, b, n, a, n, &zero, c, n));
    cudaEvent_t t0, t1;
    CK(cudaEventCreate(&t0));
    CK(cudaEventCreate(&t1));
    CK(cudaEventRecord(t0, 0));
    for (int i = 0; i < iters; i++)
        CB(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, b, n, a, n, &zero, c, n));
    CK(cudaEventRecord(t1, 0));
    CK(cudaEventSynchronize(t1));
    float ms;
    CK(cudaEventElapsedTime(&ms, t0, t1));
    double tflops = 2.0 * n * (double)n * n * iters / (ms * 1e-3) / 1e12;
    printf("CUBLAS_FP32 %d %.2f\n", n, tflops);
    cublasDestroy(h);
    return 0;
}
