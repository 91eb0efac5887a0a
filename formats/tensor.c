// Small helpers on tensor views.
#include "formats/tensor.h"

int64_t kvq_tensor_numel(const kvq_tensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}
