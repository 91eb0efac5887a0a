// RoPE: frequency tables (transformers' _compute_default/linear/llama3_parameters,
// reproduced in fp32) and the rotation, reference and fast. Angles are fp32 products
// pos·inv_freq as HF forms them; cos/sin of that float are evaluated in double.
#include "kernels/cpu/rope.h"

#include <math.h>
#include <stdlib.h>

#include "formats/error.h"
#include "kernels/cpu/threads.h"

void kvq_rope_freqs(float *inv_freq, int rot_dim, const kvq_rope_params *p) {
    int half = rot_dim / 2;
    for (int i = 0; i < half; i++) {
        float e = (float)(2 * i) / (float)rot_dim;
        inv_freq[i] = 1.0f / powf((float)p->theta, e);
    }
    if (p->type == KVQ_ROPE_SCALE_LINEAR) {
        for (int i = 0; i < half; i++) inv_freq[i] /= (float)p->factor;
    } else if (p->type == KVQ_ROPE_SCALE_LLAMA3) {
        float factor = (float)p->factor, lo = (float)p->low_freq_factor, hi = (float)p->high_freq_factor;
        float old = (float)p->original_max_position;
        float lo_wl = old / lo, hi_wl = old / hi;
        for (int i = 0; i < half; i++) {
            float f = inv_freq[i];
            float wl = (float)(2.0 * M_PI) / f;
            float g = wl > lo_wl ? f / factor : f;                  // low frequencies: divide
            if (!(wl < hi_wl) && !(wl > lo_wl)) {                   // medium: smooth blend
                float s = (old / wl - lo) / (hi - lo);
                g = (1.0f - s) * g / factor + s * g;
            }
            inv_freq[i] = g;
        }
    }
}

void kvq_rope_ref(float *x, int n_heads, int head_dim, int rot_dim, int pos, const float *inv_freq) {
    int half = rot_dim / 2;
    for (int h = 0; h < n_heads; h++) {
        float *v = x + (size_t)h * head_dim;
        for (int i = 0; i < half; i++) {
            float a = (float)pos * inv_freq[i];
            float c = (float)cos((double)a), s = (float)sin((double)a);
            float x0 = v[i], x1 = v[i + half];
            v[i] = x0 * c - x1 * s;
            v[i + half] = x1 * c + x0 * s;
        }
    }
}

void kvq_rope(float *x, int T, int n_heads, int head_dim, int rot_dim, int pos0,
              const float *inv_freq, int n_threads) {
    int half = rot_dim / 2;
#pragma omp parallel num_threads(kvq_nthreads(n_threads)) if (T > 8)
    {
        // One token's cos/sin table on the stack (no allocation on the hot path); wider
        // rotations (half > 512, head_dim > 1024) recompute them per head: the same floats.
        float tab[1024];
        float *cs = half <= 512 ? tab : NULL;
#pragma omp for
        for (int t = 0; t < T; t++) {
            if (cs)
                for (int i = 0; i < half; i++) {
                    float a = (float)(pos0 + t) * inv_freq[i];
                    cs[i] = (float)cos((double)a);
                    cs[half + i] = (float)sin((double)a);
                }
            for (int h = 0; h < n_heads; h++) {
                float *v = x + ((size_t)t * n_heads + h) * head_dim;
                if (!cs) {
                    for (int i = 0; i < half; i++) {
                        float a = (float)(pos0 + t) * inv_freq[i];
                        float c = (float)cos((double)a), sn = (float)sin((double)a), x0 = v[i], x1 = v[i + half];
                        v[i] = x0 * c - x1 * sn;
                        v[i + half] = x1 * c + x0 * sn;
                    }
                    continue;
                }
#pragma omp simd
                for (int i = 0; i < half; i++) {
                    float x0 = v[i], x1 = v[i + half];
                    v[i] = x0 * cs[i] - x1 * cs[half + i];
                    v[i + half] = x1 * cs[i] + x0 * cs[half + i];
                }
            }
        }
    }
}
