// Tensor-core products for prefill and verification (many tokens at once): cuBLAS bf16 GEMM
// with fp32 accumulation and fp32 output, loaded at run time (dlopen) so that nothing links
// against cuBLAS: a machine without it keeps the CUDA-core kernels, and kvq_cuda_tc_available
// says why. Also the fp32 → bf16 conversion of activations these products read.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/ops.h"

// ---- cuBLAS, found at run time
typedef cublasStatus_t (*create_fn)(cublasHandle_t *);
typedef cublasStatus_t (*stream_fn)(cublasHandle_t, cudaStream_t);
typedef cublasStatus_t (*gemm_fn)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void *,
                                  const void *, cudaDataType, int, const void *, cudaDataType, int, const void *, void *,
                                  cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);

static struct {
    int tried, ok;
    char why[200];
    cublasHandle_t h;
    stream_fn set_stream;
    gemm_fn gemm;
} g_blas;

// Opens cuBLAS once: KVQ_CUBLAS (a path) first, then the sonames of CUDA 13 and 12.
static int blas_open(void) {
    if (g_blas.tried) return g_blas.ok;
    g_blas.tried = 1;
    const char *env = getenv("KVQ_CUBLAS");
    const char *names[] = {env && *env ? env : NULL, "libcublas.so.13", "libcublas.so.12", "libcublas.so"};
    void *lib = NULL;
    for (size_t i = 0; i < sizeof names / sizeof names[0] && !lib; i++)
        if (names[i]) lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        snprintf(g_blas.why, sizeof g_blas.why, "cuBLAS not found (libcublas.so.13/.12; KVQ_CUBLAS names a path): %s",
                 dlerror());
        return 0;
    }
    create_fn create = (create_fn)dlsym(lib, "cublasCreate_v2");
    g_blas.set_stream = (stream_fn)dlsym(lib, "cublasSetStream_v2");
    g_blas.gemm = (gemm_fn)dlsym(lib, "cublasGemmEx");
    if (!create || !g_blas.set_stream || !g_blas.gemm) {
        snprintf(g_blas.why, sizeof g_blas.why, "cuBLAS lacks cublasCreate_v2/cublasSetStream_v2/cublasGemmEx");
        return 0;
    }
    cublasStatus_t s = create(&g_blas.h);
    if (s != CUBLAS_STATUS_SUCCESS) {
        snprintf(g_blas.why, sizeof g_blas.why, "cublasCreate failed (status %d)", (int)s);
        return 0;
    }
    g_blas.ok = 1;
    return 1;
}

extern "C" int kvq_cuda_tc_available(char *why, size_t n) {
    const int ok = blas_open();
    if (why && n) snprintf(why, n, "%s", ok ? "cuBLAS bf16 tensor cores" : g_blas.why);
    return ok;
}

// Y (T, ·) with row stride ldy, columns [0, rows) = X (T, k) · Wᵀ, W (rows, k) row-major with
// row stride ldw, both bf16; beta 1 adds to Y. Column-major terms: C (rows × T) = op(A)·B with
// A = W viewed as (k × rows) col-major, transposed.
extern "C" kvq_status kvq_cuda_gemm_bf16(const void *w, int64_t ldw, const void *x, int64_t ldx, float *y, int64_t ldy,
                                         int T, int64_t rows, int64_t k, int accumulate, kvq_err *err) {
    if (!blas_open()) return kvq_err_set(err, KVQ_ERR_UNSUPPORTED, "cuda: %s", g_blas.why);
    if (rows > INT32_MAX || k > INT32_MAX || ldw > INT32_MAX || ldx > INT32_MAX || ldy > INT32_MAX)
        return kvq_err_set(err, KVQ_ERR_UNSUPPORTED, "cuda: a %lld x %lld product exceeds cuBLAS's int sizes",
                           (long long)rows, (long long)k);
    const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
    cublasStatus_t s = g_blas.set_stream(g_blas.h, kvq_cuda_stream());
    if (s == CUBLAS_STATUS_SUCCESS)
        s = g_blas.gemm(g_blas.h, CUBLAS_OP_T, CUBLAS_OP_N, (int)rows, T, (int)k, &alpha, w, CUDA_R_16BF, (int)ldw, x,
                        CUDA_R_16BF, (int)ldx, &beta, y, CUDA_R_32F, (int)ldy, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    if (s != CUBLAS_STATUS_SUCCESS)
        return kvq_err_set(err, KVQ_ERR_IO, "cuda: cublasGemmEx (%lld x %lld, %d tokens): status %d", (long long)rows,
                           (long long)k, T, (int)s);
    return KVQ_OK;
}

// ---- activations to bf16: xb (T, ld) = bf16(x (T, n)), zero in columns [n, ld)
__global__ void f32_to_bf16(const float *__restrict__ x, __nv_bfloat16 *__restrict__ xb, int64_t n, int64_t ld) {
    const int t = blockIdx.y;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < ld; i += (int64_t)gridDim.x * blockDim.x)
        xb[t * ld + i] = __float2bfloat16_rn(i < n ? x[t * n + i] : 0.0f);
}

extern "C" kvq_status kvq_cuda_to_bf16(const float *x, void *xb, int T, int64_t n, int64_t ld, kvq_err *err) {
    if (T <= 0) return KVQ_OK;
    const unsigned blocks = (unsigned)((ld + 255) / 256 < 1024 ? (ld + 255) / 256 : 1024);
    f32_to_bf16<<<dim3(blocks, (unsigned)T), 256, 0, kvq_cuda_stream()>>>(x, (__nv_bfloat16 *)xb, n, ld);
    CU_LAUNCHED("f32_to_bf16");
    return KVQ_OK;
}

// ---- scratch shared by the tensor-core products (grown on demand, never while capturing:
// these products run for prefill chunks, which are not captured)
static void *g_scratch[2];
static size_t g_scratch_size[2];

extern "C" kvq_status kvq_cuda_tc_scratch(int which, size_t bytes, void **out, kvq_err *err) {
    if (which < 0 || which > 1) return kvq_err_set(err, KVQ_ERR_ARG, "cuda: scratch %d", which);
    if (g_scratch_size[which] < bytes) {
        if (g_scratch[which]) cudaFree(g_scratch[which]); // synchronizes: nothing still reads it
        g_scratch[which] = NULL;
        g_scratch_size[which] = 0;
        CU_TRY(cudaMalloc(&g_scratch[which], bytes));
        g_scratch_size[which] = bytes;
    }
    *out = g_scratch[which];
    return KVQ_OK;
}

extern "C" size_t kvq_cuda_tc_scratch_bytes(void) { return g_scratch_size[0] + g_scratch_size[1]; }

extern "C" kvq_status kvq_cuda_dense_matmul_tc(const void *w, const float *x, float *y, int T, int64_t cols, int64_t rows,
                                               int64_t ldy, int accumulate, kvq_err *err) {
    void *xb = NULL;
    kvq_status s = kvq_cuda_tc_scratch(0, sizeof(__nv_bfloat16) * (size_t)T * (size_t)cols, &xb, err);
    if (!s) s = kvq_cuda_to_bf16(x, xb, T, cols, cols, err);
    if (!s) s = kvq_cuda_gemm_bf16(w, cols, xb, cols, y, ldy, T, rows, cols, accumulate, err);
    return s;
}
