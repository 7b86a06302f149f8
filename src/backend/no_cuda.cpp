// Built when FLIDE_CUDA is off: asking for the CUDA backend is a clear error, not a crash.
#include "backend/ops.h"
#include "core/error.h"

namespace flide {

std::unique_ptr<Ops> make_cuda_ops(int /*device*/, bool /*batch_invariant*/,
                                   Quantization /*quantization*/) {
  throw Error("this flide was built without the CUDA backend (configure with -DFLIDE_CUDA=ON)");
}

}  // namespace flide
