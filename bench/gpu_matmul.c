/* gpu_matmul.c — cuBLAS called directly: the GEMM throughput that
 * bench/gpu.sh compares tfe's matmul with. Usage: gpu_matmul N [ITERS [MODE]]
 * with MODE fp32 (default), tf32 or bf16; prints "CUBLAS_<MODE> N TFLOPS"
 * (C = A B, N x N, row-major data, the same calls gpu/matmul.c makes:
 * cublasSgemm, with TF32 tensor-op math for tf32; cublasGemmEx on bfloat16
 * data with float32 accumulation for bf16). Build (bench/gpu.sh):
 *   gcc -O2 -I$CUDA/include bench/gpu_matmul.c -L$CUDA/lib64 -lcublas -lcudart */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
    fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_)); return 1; } } while (0)
#define CB(x) do { cublasStatus_t s_ = (x); if (s_ != CUBLAS_STATUS_SUCCESS) { \
    fprintf(stderr, "%s: %s\n", #x, cublasGetStatusString(s_)); return 1; } } while (0)

static int gemm(cublasHandle_t h, int bf16, int n, const void *a, const void *b, void *c) {
    const float one = 1.0f, zero = 0.0f;
    if (bf16)
        CB(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, b, CUDA_R_16BF, n, a, CUDA_R_16BF, n, &zero, c,
                        CUDA_R_16BF, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    else
        CB(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, b, n, a, n, &zero, c, n));
    return 0;
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 4096, iters = argc > 2 ? atoi(argv[2]) : 20;
    const char *mode = argc > 3 ? argv[3] : "fp32";
    int bf16 = strcmp(mode, "bf16") == 0, tf32 = strcmp(mode, "tf32") == 0;
    if (!bf16 && !tf32 && strcmp(mode, "fp32") != 0) {
        fprintf(stderr, "gpu_matmul: MODE is fp32, tf32 or bf16\n");
        return 2;
    }
    size_t bytes = (size_t)n * n * (bf16 ? 2 : 4);
    void *a, *b, *c;
    CK(cudaMalloc(&a, bytes));
    CK(cudaMalloc(&b, bytes));
    CK(cudaMalloc(&c, bytes));
    CK(cudaMemset(a, 0, bytes));
    CK(cudaMemset(b, 0, bytes));
    cublasHandle_t h;
    CB(cublasCreate(&h));
    if (tf32) CB(cublasSetMathMode(h, CUBLAS_TF32_TENSOR_OP_MATH));
    for (int i = 0; i < 3; i++) /* warm-up (heuristics, clocks) */
        if (gemm(h, bf16, n, a, b, c)) return 1;
    cudaEvent_t t0, t1;
    CK(cudaEventCreate(&t0));
    CK(cudaEventCreate(&t1));
    CK(cudaEventRecord(t0, 0));
    for (int i = 0; i < iters; i++)
        if (gemm(h, bf16, n, a, b, c)) return 1;
    CK(cudaEventRecord(t1, 0));
    CK(cudaEventSynchronize(t1));
    float ms;
    CK(cudaEventElapsedTime(&ms, t0, t1));
    double tflops = 2.0 * n * (double)n * n * iters / (ms * 1e-3) / 1e12;
    for (char *p = (char *)mode; *p; p++) *p = (char)(*p >= 'a' && *p <= 'z' ? *p - 32 : *p);
    printf("CUBLAS_%s %d %.2f\n", mode, n, tflops);
    cublasDestroy(h);
    return 0;
}
