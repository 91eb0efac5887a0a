// QET swap trees (paper 004, Algorithm 1 steps 1–2 and Algorithm 2 step 3). Each row is
// split pairwise into its smaller (S) and larger (L) halves, level by level, inside the
// blocks of the previous level; X* is [S_l^1 L_l^1 S_l^2 L_l^2 ...]. One indicator bit per
// pair per level says whether the pair was swapped, so the inverse is exact.
#include <stdlib.h>
#include <string.h>

#include "libconv/codec/qet/qet.h"

// One row, forward. At level k the row holds 2^(k-1) blocks of width W = d / 2^(k-1);
// block [a0 a1 a2 a3 ...] becomes [min(a0,a1) min(a2,a3) ... | max(a0,a1) max(a2,a3) ...].
static void swap_row(const float *x, int64_t d, int l, float *xs, uint8_t *bits, float *tmp) {
    memcpy(xs, x, sizeof(float) * (size_t)d);
    for (int k = 0; k < l; k++) {
        int64_t W = d >> k, h = W / 2;
        uint8_t *b = bits + (int64_t)k * (d / 2);
        for (int64_t blk = 0; blk < d; blk += W) {
            const float *a = xs + blk;
            for (int64_t j = 0; j < h; j++) {
                float u = a[2 * j], v = a[2 * j + 1];
                int sw = u > v;
                b[blk / 2 + j] = (uint8_t)sw;
                tmp[blk + j] = sw ? v : u;
                tmp[blk + h + j] = sw ? u : v;
            }
        }
        memcpy(xs, tmp, sizeof(float) * (size_t)d);
    }
}

static void unswap_row(const float *xs, const uint8_t *bits, int64_t d, int l, float *x, float *tmp) {
    memcpy(x, xs, sizeof(float) * (size_t)d);
    for (int k = l - 1; k >= 0; k--) {
        int64_t W = d >> k, h = W / 2;
        const uint8_t *b = bits + (int64_t)k * (d / 2);
        for (int64_t blk = 0; blk < d; blk += W) {
            const float *s = x + blk, *L = x + blk + h;
            for (int64_t j = 0; j < h; j++) {
                int sw = b[blk / 2 + j];
                tmp[blk + 2 * j] = sw ? L[j] : s[j];
                tmp[blk + 2 * j + 1] = sw ? s[j] : L[j];
            }
        }
        memcpy(x, tmp, sizeof(float) * (size_t)d);
    }
}

int kvq_qet_swap_forward(const float *x, int64_t n, int64_t d, int l, float *xs, uint8_t *bits) {
    int oom = 0;
#pragma omp parallel
    {
        float *tmp = malloc(sizeof(float) * (size_t)d);
        if (!tmp) {
#pragma omp atomic write
            oom = 1;
        }
#pragma omp for schedule(static)
        for (int64_t i = 0; i < n; i++)
            if (tmp) swap_row(x + i * d, d, l, xs + i * d, bits + i * (int64_t)l * (d / 2), tmp);
        free(tmp);
    }
    return oom ? -1 : 0;
}

int kvq_qet_swap_inverse(const float *xs, const uint8_t *bits, int64_t n, int64_t d, int l, float *x) {
    int oom = 0;
#pragma omp parallel
    {
        float *tmp = malloc(sizeof(float) * (size_t)d);
        if (!tmp) {
#pragma omp atomic write
            oom = 1;
        }
#pragma omp for schedule(static)
        for (int64_t i = 0; i < n; i++)
            if (tmp) unswap_row(xs + i * d, bits + i * (int64_t)l * (d / 2), d, l, x + i * d, tmp);
        free(tmp);
    }
    return oom ? -1 : 0;
}

// Reference: the paper's formulation with whole matrices. Level k takes each of the
// 2^(k-1) matrices P (n × W) of the previous level and splits it into S (n × W/2) and
// L (n × W/2) by comparing columns 2j and 2j+1; the new list is S^1 L^1 S^2 L^2 ...
int kvq_qet_swap_forward_ref(const float *x, int64_t n, int64_t d, int l, float *xs, uint8_t *bits) {
    int64_t nmat = 1, W = d;
    float **mats = calloc(1, sizeof(float *));
    if (!mats || !(mats[0] = malloc(sizeof(float) * (size_t)(n * d)))) { free(mats); return -1; }
    memcpy(mats[0], x, sizeof(float) * (size_t)(n * d));
    int oom = 0;
    for (int k = 0; k < l && !oom; k++) {
        int64_t h = W / 2;
        float **next = calloc((size_t)(2 * nmat), sizeof(float *));
        if (!next) { oom = 1; break; }
        for (int64_t p = 0; p < nmat; p++) {
            float *S = malloc(sizeof(float) * (size_t)(n * h)), *L = malloc(sizeof(float) * (size_t)(n * h));
            next[2 * p] = S;
            next[2 * p + 1] = L;
            if (!S || !L) { oom = 1; break; }
            for (int64_t i = 0; i < n; i++)
                for (int64_t j = 0; j < h; j++) {
                    float u = mats[p][i * W + 2 * j], v = mats[p][i * W + 2 * j + 1];
                    uint8_t ind = u > v ? 1 : 0; // smaller element was on the right
                    S[i * h + j] = ind ? v : u;
                    L[i * h + j] = ind ? u : v;
                    bits[(i * l + k) * (d / 2) + p * h + j] = ind;
                }
        }
        for (int64_t p = 0; p < nmat; p++) free(mats[p]);
        free(mats);
        mats = next;
        nmat *= 2;
        W = h;
    }
    for (int64_t p = 0; p < nmat; p++) {
        if (!oom)
            for (int64_t i = 0; i < n; i++)
                memcpy(xs + i * d + p * W, mats[p] + i * W, sizeof(float) * (size_t)W);
        free(mats[p]);
    }
    free(mats);
    return oom ? -1 : 0;
}
