#!/usr/bin/env bash
# Device call (issue 12): test_cuda_model with one shared model beside it (the device's transfer
# limit fits one at a time): GPU vs CPU logits, decode vs prefill, greedy agreement over 32
# tokens, and the converted files made from that model. Carried: .cv/tests.tar.xz
# (test_cuda_model and its libraries) and .cv/MODEL.tar.xz (models/NAME from ../shared).
# usage (on the device): bash tests/bench/gpu_shared_models.sh MODEL_TARBALL
set -u
V=/tmp/s; mkdir -p $V
tar -C $V -xJf .cv/tests.tar.xz; tar -C $V -xJf "$1"
export LD_LIBRARY_PATH=$V/lib KVQ_SHARED=$V
timeout 500 $V/bin/test_cuda_model > $OUT/model.log 2>&1; echo "rc $?"
grep -E 'models/|m[0-9].kvq|PASSED|FAILED|skip' $OUT/model.log | sed 's/  */ /g' | cut -c1-300
