// Rotary position embedding in transformers' half-split layout: for i < d/2 the pair
// (x[i], x[i + d/2]) rotates by pos · inv_freq[i], d = rot_dim ≤ head_dim (partial
// rotary leaves the tail untouched). Frequencies: default, linear and llama3 scaling.
#ifndef KVQ_KERNELS_ROPE_H
#define KVQ_KERNELS_ROPE_H

typedef enum { KVQ_ROPE_SCALE_NONE = 0, KVQ_ROPE_SCALE_LINEAR, KVQ_ROPE_SCALE_LLAMA3 } kvq_rope_scale;

typedef struct {
    kvq_rope_scale type;
    double theta;
    double factor;             // linear, llama3
    double low_freq_factor;    // llama3
    double high_freq_factor;   // llama3
    int original_max_position; // llama3
} kvq_rope_params;

/** Fills inv_freq (rot_dim/2) in fp32 exactly as transformers' rope init functions
 *  do (1/θ^(2i/d) in fp32, then the scaling rule). */
void kvq_rope_freqs(float *inv_freq, int rot_dim, const kvq_rope_params *p);

/** x (n_heads, head_dim) of one token at position pos, rotated in place. */
void kvq_rope_ref(float *x, int n_heads, int head_dim, int rot_dim, int pos, const float *inv_freq);

/** x (T, n_heads, head_dim) for positions pos0..pos0+T-1; cos/sin computed once per
 *  token and shared by its heads. OpenMP over tokens. */
void kvq_rope(float *x, int T, int n_heads, int head_dim, int rot_dim, int pos0,
              const float *inv_freq, int n_threads);

#endif
