// cuBLAS opened when a kernel first needs it, not linked: libcublas and libcublasLt are some
// 700 MB that a kvcalc which measures no GPU would otherwise map at every start, and a kvcalc
// built with CUDA would not start at all where they are missing. The entry points the kernels
// call are defined here, under cuBLAS's own names, and forward to the library's; while the
// library cannot be opened they return CUBLAS_STATUS_NOT_INITIALIZED, and the status string
// says why.

#include <kvcalc/kernels/cuda/cuda_kernels.hpp>

#include <cublas_v2.h>
#include <dlfcn.h>

#include <stdexcept>
#include <string>

namespace kvcalc::kernels::cuda {

namespace {

#define KVCALC_STRINGIFY_(x) #x
#define KVCALC_STRINGIFY(x) KVCALC_STRINGIFY_(x)

/// The soname of the cuBLAS this build was compiled against, searched the way the dynamic
/// loader searches for a linked library: LD_LIBRARY_PATH, the binary's run path, the loader's
/// cache, the system folders.
constexpr const char* k_soname = "libcublas.so." KVCALC_STRINGIFY(CUBLAS_VER_MAJOR);

struct Library {
  void* handle = nullptr;
  std::string failure; ///< the loader's reason, when handle is null
};

const Library& library() {
  static const Library opened = [] {
    Library l;
    l.handle = dlopen(k_soname, RTLD_NOW | RTLD_LOCAL);
    if (l.handle == nullptr) {
      const char* reason = dlerror();
      l.failure = reason != nullptr ? reason : "unknown reason";
    }
    return l;
  }();
  return opened;
}

/// The library's own definition of `name`, or null while the library cannot be opened.
void* entry(const char* name) {
  const Library& l = library();
  if (l.handle == nullptr) {
    return nullptr;
  }
  void* symbol = dlsym(l.handle, name);
  if (symbol == nullptr) {
    throw std::runtime_error(std::string(k_soname) + " has no " + name +
                             "; it is older than the cuBLAS this kvcalc was built with");
  }
  return symbol;
}

/// Calls `function` (an entry) with `args`, or reports cuBLAS not initialised. Its type is the
/// caller's parameter list, which the compiler has checked against cublas_api.h.
template <class... Args> cublasStatus_t call(void* function, Args... args) {
  using Function = cublasStatus_t (*)(Args...);
  return function != nullptr ? reinterpret_cast<Function>(function)(args...)
                             : CUBLAS_STATUS_NOT_INITIALIZED;
}

} // namespace

std::string cublas_library() {
  return k_soname;
}

void open_cublas() {
  const Library& l = library();
  if (l.handle == nullptr) {
    throw std::runtime_error("cannot open cuBLAS: " + l.failure);
  }
}

} // namespace kvcalc::kernels::cuda

using kvcalc::kernels::cuda::call;
using kvcalc::kernels::cuda::entry;

// The definitions match cublas_api.h's declarations, so a changed signature fails to compile.
extern "C" {

cublasStatus_t CUBLASWINAPI cublasCreate_v2(cublasHandle_t* handle) {
  static void* const function = entry("cublasCreate_v2");
  return call(function, handle);
}

cublasStatus_t CUBLASWINAPI cublasDestroy_v2(cublasHandle_t handle) {
  static void* const function = entry("cublasDestroy_v2");
  return call(function, handle);
}

cublasStatus_t CUBLASWINAPI cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
  static void* const function = entry("cublasSetMathMode");
  return call(function, handle, mode);
}

cublasStatus_t CUBLASWINAPI cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa,
                                         cublasOperation_t transb, int m, int n, int k,
                                         const void* alpha, const void* A, cudaDataType Atype,
                                         int lda, const void* B, cudaDataType Btype, int ldb,
                                         const void* beta, void* C, cudaDataType Ctype, int ldc,
                                         cublasComputeType_t computeType, cublasGemmAlgo_t algo) {
  static void* const function = entry("cublasGemmEx");
  return call(function, handle, transa, transb, m, n, k, alpha, A, Atype, lda, B, Btype, ldb, beta,
              C, Ctype, ldc, computeType, algo);
}

cublasStatus_t CUBLASWINAPI
cublasGemmBatchedEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                    int m, int n, int k, const void* alpha, const void* const Aarray[],
                    cudaDataType Atype, int lda, const void* const Barray[], cudaDataType Btype,
                    int ldb, const void* beta, void* const Carray[], cudaDataType Ctype, int ldc,
                    int batchCount, cublasComputeType_t computeType, cublasGemmAlgo_t algo) {
  static void* const function = entry("cublasGemmBatchedEx");
  return call(function, handle, transa, transb, m, n, k, alpha, Aarray, Atype, lda, Barray, Btype,
              ldb, beta, Carray, Ctype, ldc, batchCount, computeType, algo);
}

cublasStatus_t CUBLASWINAPI cublasGemmStridedBatchedEx(
    cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k,
    const void* alpha, const void* A, cudaDataType Atype, int lda, long long int strideA,
    const void* B, cudaDataType Btype, int ldb, long long int strideB, const void* beta, void* C,
    cudaDataType Ctype, int ldc, long long int strideC, int batchCount,
    cublasComputeType_t computeType, cublasGemmAlgo_t algo) {
  static void* const function = entry("cublasGemmStridedBatchedEx");
  return call(function, handle, transa, transb, m, n, k, alpha, A, Atype, lda, strideA, B, Btype,
              ldb, strideB, beta, C, Ctype, ldc, strideC, batchCount, computeType, algo);
}

const char* CUBLASWINAPI cublasGetStatusName(cublasStatus_t status) {
  static void* const function = entry("cublasGetStatusName");
  if (function != nullptr) {
    return reinterpret_cast<const char* (*)(cublasStatus_t)>(function)(status);
  }
  return "CUBLAS_STATUS_NOT_INITIALIZED";
}

const char* CUBLASWINAPI cublasGetStatusString(cublasStatus_t status) {
  static void* const function = entry("cublasGetStatusString");
  if (function != nullptr) {
    return reinterpret_cast<const char* (*)(cublasStatus_t)>(function)(status);
  }
  static const std::string why = "cannot open " + kvcalc::kernels::cuda::cublas_library() + ": " +
                                 kvcalc::kernels::cuda::library().failure;
  return why.c_str();
}

} // extern "C"
