// The forward pass's stream and CUDA graphs (ops.h).
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/ops.h"

static cudaStream_t g_stream = 0; // legacy default stream until kvq_cuda_stream_init

cudaStream_t kvq_cuda_stream(void) { return g_stream; }

extern "C" kvq_status kvq_cuda_stream_init(kvq_err *err) {
    if (g_stream) return KVQ_OK;
    CU_TRY(cudaStreamCreate(&g_stream)); // blocking: synchronous copies elsewhere still order with it
    return KVQ_OK;
}

extern "C" kvq_status kvq_cuda_copy_async(void *dst, const void *src, size_t size, int to_device, kvq_err *err) {
    CU_TRY(cudaMemcpyAsync(dst, src, size, to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost, g_stream));
    return KVQ_OK;
}

extern "C" kvq_status kvq_cuda_stream_sync(kvq_err *err) {
    CU_TRY(cudaStreamSynchronize(g_stream));
    return KVQ_OK;
}

extern "C" kvq_status kvq_cuda_capture_begin(kvq_err *err) {
    if (!g_stream) return kvq_err_set(err, KVQ_ERR_ARG, "cuda: capture needs kvq_cuda_stream_init");
    CU_TRY(cudaStreamBeginCapture(g_stream, cudaStreamCaptureModeRelaxed));
    return KVQ_OK;
}

extern "C" kvq_status kvq_cuda_capture_end(int abort, void **graph, kvq_err *err) {
    *graph = NULL;
    cudaGraph_t g = NULL;
    cudaError_t e = cudaStreamEndCapture(g_stream, &g);
    if (abort || e != cudaSuccess) {
        if (g) cudaGraphDestroy(g);
        cudaGetLastError(); // clear a capture error so later calls run
        return abort ? KVQ_OK : cu_fail(err, e, "cudaStreamEndCapture");
    }
    cudaGraphExec_t x = NULL;
    e = cudaGraphInstantiate(&x, g, 0);
    cudaGraphDestroy(g);
    if (e != cudaSuccess) return cu_fail(err, e, "cudaGraphInstantiate");
    *graph = (void *)x;
    return KVQ_OK;
}

static long g_launches = 0; // graphs launched (kvq_cuda_graph_launches)

extern "C" kvq_status kvq_cuda_graph_launch(void *graph, kvq_err *err) {
    CU_TRY(cudaGraphLaunch((cudaGraphExec_t)graph, g_stream));
    g_launches++;
    return KVQ_OK;
}

extern "C" long kvq_cuda_graph_launches(void) { return g_launches; }

extern "C" void kvq_cuda_graph_free(void *graph) {
    if (graph) cudaGraphExecDestroy((cudaGraphExec_t)graph);
}

// ---- Timeline of a captured step (KVQ_CUDA_TIMELINE=1): timing events recorded as graph
// nodes (cudaEventRecordExternal) between the step's operations, read after a replay. An
// event node orders the kernels around it fully, so a programmatic launch across a mark runs
// as a plain dependency: the timeline says where a step's time goes, not its exact total.
#define TL_MAX 2048
static cudaEvent_t g_tl[2][TL_MAX];

extern "C" kvq_status kvq_cuda_tl_mark(int variant, int i, kvq_err *err) {
    if (variant < 0 || variant > 1 || i < 0 || i >= TL_MAX)
        return kvq_err_set(err, KVQ_ERR_ARG, "cuda timeline: mark %d beyond %d", i, TL_MAX);
    if (!g_tl[variant][i]) CU_TRY(cudaEventCreate(&g_tl[variant][i]));
    CU_TRY(cudaEventRecordWithFlags(g_tl[variant][i], g_stream, cudaEventRecordExternal));
    return KVQ_OK;
}

extern "C" kvq_status kvq_cuda_tl_elapsed(int variant, int i, float *ms, kvq_err *err) {
    if (variant < 0 || variant > 1 || i < 1 || i >= TL_MAX || !g_tl[variant][i] || !g_tl[variant][i - 1])
        return kvq_err_set(err, KVQ_ERR_ARG, "cuda timeline: no marks %d, %d", i - 1, i);
    CU_TRY(cudaEventElapsedTime(ms, g_tl[variant][i - 1], g_tl[variant][i]));
    return KVQ_OK;
}
