// Shared between the verify_*.c files only (not part of the public interface).
#ifndef KVQ_VERIFY_INTERNAL_H
#define KVQ_VERIFY_INTERNAL_H

#include "libconv/runtime/model.h"
#include "libconv/verify/verify.h"

typedef struct {
    double ref_nll, ref_ppl, ref_nll2, ref_ppl_se;
    size_t n_scored, n_windows, n_used;
} vf_lockstep;

/** Steps ref and q[0..nq) (nq <= 3) through the windows of p over ids[0..n), at most
 *  max_windows windows (0: all); fills runs[k] (label set by the caller) and out. */
kvq_status kvq_verify_lockstep(kvq_model *ref, kvq_model **q, int nq, const int32_t *ids, size_t n,
                               const kvq_eval_protocol *p, size_t max_windows, vf_lockstep *out,
                               kvq_verify_eval *runs, const kvq_verify_opts *o, kvq_err *err);

#endif
