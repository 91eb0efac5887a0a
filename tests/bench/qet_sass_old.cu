// Not built by the Makefile: the previous QET kernel's lane (kvq_pql_qet, KVQ_CUDA_QET=decode) with the branch
// values of the 8B `qet:4` plan fixed (CQO codebooks of 10 bits, stage-1 indices Q0 bits, stage-2 8 bits, two
// stages), so that its compiled loops are the path the kernel executes there; docs/RESULTS.md (2026-11-27,
// session 14) counts them with tests/bench/sass_loops.py:
//   nvcc -O3 -arch=sm_90 -I. -c tests/bench/qet_sass_old.cu -o /tmp/old.o
//   python3 tests/bench/sass_loops.py /tmp/old.o qet_sass_old
#include "kernels/cuda/pqx_lane.h"

template <int Q0, int NB>
__global__ void qet_sass_old(kvq_pqx p, const float *__restrict__ x, int64_t ldx, float *__restrict__ y) {
    p.cb_type = KVQ_PQX_CB_CQO;
    p.cb_bits = 10;
    p.qbits[0] = Q0;
    p.qbits[1] = 8;
    p.stages = 2;
    const int lane = threadIdx.x & 31;
    const int64_t r = (int64_t)blockIdx.x * 4 + (threadIdx.x >> 5);
    float acc[NB];
    kvq_pql_qet(&p, x, ldx, NB, r, lane, acc);
    for (int t = 0; t < NB; t++) y[(r * 32 + lane) * NB + t] = acc[t];
}
template __global__ void qet_sass_old<16, 1>(kvq_pqx, const float *, int64_t, float *);
template __global__ void qet_sass_old<8, 1>(kvq_pqx, const float *, int64_t, float *);
template __global__ void qet_sass_old<16, 8>(kvq_pqx, const float *, int64_t, float *);
