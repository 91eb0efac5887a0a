// Where a chunk's token sits (ops.h, kvq_cuda_seqs): one sequence (token t at pos + t, one
// cache) or a decode step of several sequences (token t at pos[t] of sequence seq[t]'s cache,
// stride floats per sequence). Shared by the rope and attention kernels.
#ifndef KVQ_CUDA_SEQS_CUH
#define KVQ_CUDA_SEQS_CUH

#include "kernels/cuda/ops.h"

struct SeqK {
    const int *seq, *pos;
    int64_t stride;
};
static inline SeqK seqk_of(const kvq_cuda_seqs *s) { return s ? SeqK{s->seq, s->pos, s->stride} : SeqK{NULL, NULL, 0}; }
/** Token t's position: pos + t for one sequence. */
__device__ __forceinline__ int seq_pos(const SeqK &s, int pos, int t) { return s.seq ? s.pos[t] : pos + t; }
/** Floats from sequence 0's cache to token t's. */
__device__ __forceinline__ int64_t seq_off(const SeqK &s, int t) { return s.seq ? (int64_t)s.seq[t] * s.stride : 0; }

#endif
