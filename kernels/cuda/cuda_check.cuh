// CUDA error checking shared by the kernels/cuda/*.cu launchers: every call's status and
// the last error after each launch become a kvq_status with a message naming the call.
#ifndef KVQ_CUDA_CHECK_CUH
#define KVQ_CUDA_CHECK_CUH

#include <cuda_runtime.h>

extern "C" {
#include "formats/error.h" // a C header without its own extern "C"
}

static inline kvq_status cu_fail(kvq_err *err, cudaError_t e, const char *what) {
    return kvq_err_set(err, e == cudaErrorMemoryAllocation ? KVQ_ERR_NOMEM : KVQ_ERR_IO, "cuda: %s: %s", what,
                       cudaGetErrorString(e));
}
/** The stream the forward-pass launchers use (kernels/cuda/graph.cu): the legacy default
 *  stream until kvq_cuda_stream_init makes the library's own (capturable) one. */
cudaStream_t kvq_cuda_stream(void);

#define CU_TRY(call)                                                   \
    do {                                                               \
        cudaError_t e_ = (call);                                       \
        if (e_ != cudaSuccess) return cu_fail(err, e_, #call);        \
    } while (0)
#define CU_LAUNCHED(name)                                              \
    do {                                                               \
        cudaError_t e_ = cudaGetLastError();                           \
        if (e_ != cudaSuccess) return cu_fail(err, e_, "launch " name); \
    } while (0)

#endif
