// Device side of the CPU emulator of CUDA: the built-in variables, barriers, warp collectives, atomics,
// intrinsics and the PTX operations that tests/cuda_emu/transform.py maps inline asm to, plus the kernel
// launch that the transformer writes for `k<<<grid, block, smem, stream>>>(args)`.
//
// Execution model (docs/cuda-emulator.md): one OS thread runs a launch; blocks run one after another; in a
// block every CUDA thread is a fiber with its own stack. A thread runs until it reaches a block barrier or a
// warp collective (shuffle, vote, ldmatrix, mma, __syncwarp), where it switches to the next runnable thread;
// the last thread to arrive completes the operation for all. Included through the shim <cuda_runtime.h>.
#pragma once

#include <atomic>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <source_location>
#include <tuple>
#include <type_traits>
#include <utility>

#include "cuda_emu/types.h"

// ---- qualifiers -----------------------------------------------------------------------------------------
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __grid_constant__
#define __restrict__ __restrict
#define __align__(n) __attribute__((aligned(n)))
#define __constant__
#define __managed__
// transform.py rewrites every __shared__ declaration of a .cu file; one it did not see must not silently
// become a per-thread variable.
#define __shared__ static_assert(false, "__shared__ outside a .cu file transformed by tests/cuda_emu/transform.py");

// ---- built-in variables (set by the scheduler at every switch) --------------------------------------------
extern uint3 threadIdx;
extern uint3 blockIdx;
extern dim3 blockDim;
extern dim3 gridDim;
constexpr int warpSize = 32;

namespace cuda_emu {

using Loc = std::source_location;

// ---- runtime entry points (tests/cuda_emu/src) -----------------------------------------------------------
[[noreturn]] void fatal(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void kernel_entry(const char* pretty_name, unsigned max_threads);
void syncthreads(const Loc& loc);
int syncthreads_reduce(int op, int pred, const Loc& loc);  // op 0: count, 1: and, 2: or
void syncwarp(unsigned mask, const Loc& loc);
uint64_t shfl(unsigned mask, uint64_t value, int mode, int b, int c,
              const Loc& loc);                                   // mode: 0 idx, 1 up, 2 down, 3 bfly
unsigned vote(unsigned mask, int op, int pred, const Loc& loc);  // op: 0 ballot, 1 any, 2 all
unsigned match_any(unsigned mask, uint64_t value, const Loc& loc);
unsigned match_all(unsigned mask, uint64_t value, int* pred, const Loc& loc);
unsigned reduce_sync(unsigned mask, int op, unsigned value, bool is_signed,
                     const Loc& loc);  // 0 add, 1 min, 2 max, 3 and, 4 or, 5 xor
unsigned activemask();
unsigned lane_id();
void* dynamic_shared();
void* static_shared(const void* key, size_t bytes, size_t align);
size_t shared_offset(const void* p, const Loc& loc);  // __cvta_generic_to_shared
bool is_shared(const void* p);

// __shared__ T name; becomes `T& name = cuda_emu::shared_var<T, align>(&key)` (one per block, NaN-filled).
template <class T, size_t Align = alignof(T)>
inline T& shared_var(const void* key) {
  constexpr size_t a = Align > alignof(T) ? Align : alignof(T);
  return *static_cast<T*>(static_shared(key, sizeof(T), a));
}

// ---- launch ------------------------------------------------------------------------------------------------
struct LaunchConfig {
  dim3 grid, block;
  size_t smem = 0;
  void* stream = nullptr;
  static LaunchConfig make(dim3 g, dim3 b, size_t smem = 0, void* s = nullptr) { return {g, b, smem, s}; }
};

void launch_impl(const Loc& where, const void* kernel, const LaunchConfig& cfg, void (*thunk)(void*), void* ctx);
// True when `stream` is the one this thread captures into a graph: `op` is kept for cudaGraphLaunch
// instead of run (or the capture is invalidated, for the legacy stream). runtime.cpp.
bool capture_defer(const void* stream, std::function<void()> op);

template <class... P, class... A>
void launch(const Loc& where, void (*kernel)(P...), const LaunchConfig& cfg, A&&... args) {
  static_assert(sizeof...(P) == sizeof...(A), "kernel launched with the wrong number of arguments");
  // Like a call: each argument converted to its parameter type once, on the host; every thread then gets
  // its own copy of the parameters.
  struct Ctx {
    void (*k)(P...);
    std::tuple<std::decay_t<P>...> params;
  };
  void (*thunk)(void*) = [](void* c) {
    auto* x = static_cast<Ctx*>(c);
    std::apply(x->k, x->params);
  };
  auto ctx = std::make_shared<Ctx>(
      Ctx{kernel, std::tuple<std::decay_t<P>...>(static_cast<std::decay_t<P>>(std::forward<A>(args))...)});
  // Captured into a graph: the parameters as converted now, the kernel run at each replay.
  if (capture_defer(cfg.stream, [where, kernel, cfg, thunk, ctx] {
        launch_impl(where, reinterpret_cast<const void*>(kernel), cfg, thunk, ctx.get());
      }))
    return;
  launch_impl(where, reinterpret_cast<const void*>(kernel), cfg, thunk, ctx.get());
}

// ---- PTX operations (transform.py maps each inline asm statement to one of these) ------------------------
namespace ptx {
// Operand conversions by constraint letter; the sizes are those nvcc enforces.
template <class T>
inline uint32_t in_r(T v) {
  static_assert(sizeof(T) == 4 && (std::is_integral_v<T> || std::is_enum_v<T>),
                "\"r\" operand must be a 32-bit integer");
  return uint32_t(v);
}
template <class T>
inline uint64_t in_l(T v) {
  static_assert(sizeof(T) == 8, "\"l\" operand must be 64 bits");
  if constexpr (std::is_pointer_v<T>)
    return uint64_t(reinterpret_cast<uintptr_t>(v));
  else
    return uint64_t(v);
}
inline float in_f(float v) { return v; }
inline double in_d(double v) { return v; }
template <class T>
inline uint16_t in_h(T v) {
  static_assert(sizeof(T) == 2, "\"h\" operand must be 16 bits");
  uint16_t u;
  std::memcpy(&u, &v, 2);
  return u;
}
template <class T, class V>
inline void out(T& dst, V v) {
  static_assert(sizeof(T) == sizeof(V), "asm output operand of the wrong size");
  std::memcpy(&dst, &v, sizeof(V));
}

void cp_async(uint32_t dst_shared, uint64_t src_global, int cp_size, int src_size, const Loc& loc);
// trap: the kernel stops itself (a GPU fails the launch with cudaErrorLaunchFailure); the emulator stops the run.
[[noreturn]] void trap(const Loc& loc);
void cp_async_commit_group(const Loc& loc);
void cp_async_wait_group(int n, const Loc& loc);
void cp_async_wait_all(const Loc& loc);
// m8n8 .b16 matrices: `count` of 1, 2, 4; lanes 8i..8i+7 give the row addresses of matrix i.
void ldmatrix(int count, bool trans, uint32_t addr, uint32_t* r, const Loc& loc);
// D = A B + C, m16n8k16, A row-major, B col-major, f32 accumulators; ab_type 0: f16, 1: bf16.
void mma_m16n8k16_f32(int ab_type, float* d, const uint32_t* a, const uint32_t* b, const float* c, const Loc& loc);
uint32_t cvt_rn_f16x2_f32(float hi, float lo);
uint32_t cvt_rn_bf16x2_f32(float hi, float lo);
uint16_t cvt_rn_f16_f32(float f);
uint16_t cvt_rn_bf16_f32(float f);
float cvt_f32_f16(uint16_t h);
float cvt_f32_bf16(uint16_t h);
// st.shared.v2.f32 [addr], {x, y}: 8 bytes, 8-byte aligned, into the block's shared memory
void st_shared_v2_f32(uint32_t addr, float x, float y, const Loc& loc);
// st.shared.b32 [addr], v: 4 bytes, 4-byte aligned (the TMA-store epilogue's 16-bit pairs)
void st_shared_b32(uint32_t addr, uint32_t v, const Loc& loc);
// prefetch.global.L2 [addr]: no effect on memory; addr must lie inside a device allocation (stricter than a GPU,
// which ignores a prefetch it cannot serve), and its 128-byte line is recorded (cuda_emu::prefetched_lines)
void prefetch_global_l2(uint64_t addr, const Loc& loc);

// sm_90a (docs/cuda-emulator.md, "Hopper"): mbarriers (in a table of the block, keyed by shared address),
// TMA tile loads of rank 1 to 5 (performed when a thread first waits on their mbarrier: the latest completion CUDA
// allows, so a read before the wait sees the old contents), and wgmma from shared-memory descriptors
// (performed at the wgmma.wait_group that covers them, reading shared memory then, writing the
// accumulators through `d`).
void mbarrier_init(uint32_t bar, uint32_t count, const Loc& loc);
void mbarrier_arrive_expect_tx(uint32_t bar, uint32_t tx_bytes, const Loc& loc);
bool mbarrier_try_wait_parity(uint32_t bar, uint32_t parity, const Loc& loc);
void fence_mbarrier_init(const Loc& loc);
// cp.async.bulk.tensor.<rank>d: the box of `tensor_map` at coordinates coords[0..rank) (dimension 0 first)
void tma_load(uint32_t dst, uint64_t tensor_map, int rank, const int32_t* coords, uint32_t bar, const Loc& loc);
// cp.async.bulk.tensor.<rank>d...im2col: pixelsPerColumn pixels of a map made by cuTensorMapEncodeIm2col from
// coords (dimension 0 first) with the im2col offsets (rank - 2 of them, dimension 1 first)
void tma_load_im2col(uint32_t dst, uint64_t tensor_map, int rank, const int32_t* coords, const uint16_t* offsets,
                     uint32_t bar, const Loc& loc);
// cp.async.bulk.tensor.<rank>d.global.shared::cta.bulk_group: the box of `tensor_map` at coords from shared memory
// at src, in this thread's open bulk group; performed when a bulk_wait_group covers the group (the latest moment
// CUDA allows TMA to read src: a write of src before that wait shows in global memory) or when the thread exits.
void tma_store(uint64_t tensor_map, int rank, const int32_t* coords, uint32_t src, const Loc& loc);
void bulk_commit_group(const Loc& loc);
// cp.async.bulk.wait_group(.read) n: this thread's bulk groups but the newest n are performed
void bulk_wait_group(int n, const Loc& loc);
void fence_proxy_async(const Loc& loc);
// setmaxnreg.{inc,dec}.sync.aligned.u32 n: registers are not modelled; n must be a multiple of 8 in [24, 256]
void setmaxnreg(int n, const Loc& loc);
void wgmma_fence(const Loc& loc);
void wgmma_commit_group(const Loc& loc);
void wgmma_wait_group(int n, const Loc& loc);
// D (m64nN, this warp's 16 rows) += A B: ab_type 0 f16, 1 bf16; d: the n / 2 accumulators of this lane.
void wgmma_m64nNk16(int n, int ab_type, float* const* d, uint64_t desc_a, uint64_t desc_b, bool scale_d, int scale_a,
                    int scale_b, int trans_a, int trans_b, const Loc& loc);
}  // namespace ptx

template <class T>
inline uint64_t to_bits64(T v) {
  static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= 8, "shuffles move 32- or 64-bit values");
  uint64_t u = 0;
  std::memcpy(&u, &v, sizeof(T));
  return u;
}
template <class T>
inline T from_bits64(uint64_t u) {
  T v;
  std::memcpy(&v, &u, sizeof(T));
  return v;
}

// Keeps a rounded result from being fused into a neighbouring multiply-add (the *_rn intrinsics exist to
// stop nvcc's contraction; the emulated kernels are compiled with -ffp-contract=fast like nvcc's default).
template <class T>
inline T no_contract(T v) {
#if defined(__x86_64__)
  asm("" : "+x"(v));
#elif defined(__aarch64__)
  asm("" : "+w"(v));
#else
  volatile T t = v;
  v = t;
#endif
  return v;
}

}  // namespace cuda_emu

// ---- barriers and warp collectives -------------------------------------------------------------------------
inline void __syncthreads(const cuda_emu::Loc& loc = cuda_emu::Loc::current()) { cuda_emu::syncthreads(loc); }
inline int __syncthreads_count(int pred, const cuda_emu::Loc& loc = cuda_emu::Loc::current()) {
  return cuda_emu::syncthreads_reduce(0, pred, loc);
}
inline int __syncthreads_and(int pred, const cuda_emu::Loc& loc = cuda_emu::Loc::current()) {
  return cuda_emu::syncthreads_reduce(1, pred, loc);
}
inline int __syncthreads_or(int pred, const cuda_emu::Loc& loc = cuda_emu::Loc::current()) {
  return cuda_emu::syncthreads_reduce(2, pred, loc);
}
inline void __syncwarp(unsigned mask = 0xffffffffu, const cuda_emu::Loc& loc = cuda_emu::Loc::current()) {
  cuda_emu::syncwarp(mask, loc);
}

// PTX shfl.sync: c = ((32 - width) << 8) | clamp, clamp 0 for up, 0x1f otherwise.
template <class T>
inline T __shfl_sync(unsigned mask, T var, int src_lane, int width = 32,
                     const cuda_emu::Loc& loc = cuda_emu::Loc::current()) {
  return cuda_emu::from_bits64<T>(
      cuda_emu::shfl(mask, cuda_emu::to_bits64(var), 0, src_lane, ((32 - width) << 8) | 0x1f, loc));
}
template <class T>
inline T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = 32,
                        const cuda_emu::Loc& loc = cuda_emu::Loc::current()) {
  return cuda_emu::from_bits64<T>(
      cuda_emu::shfl(mask, cuda_emu::to_bits64(var), 1, int(delta), (32 - width) << 8, loc));
}
template <class T>
inline T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = 32,
                          const cuda_emu::Loc& loc = cuda_emu::Loc::current()) {
  return cuda_emu::from_bits64<T>(
      cuda_emu::shfl(mask, cuda_emu::to_bits64(var), 2, int(delta), ((32 - width) << 8) | 0x1f, loc));
}
template <class T>
inline T __shfl_xor_sync(unsigned mask, T var, int lane_mask, int width = 32,
                         const cuda_emu::Loc& loc = cuda_emu::Loc::current()) {
  return cuda_emu::from_bits64<T>(
      cuda_emu::shfl(mask, cuda_emu::to_bits64(var), 3, lane_mask, ((32 - width) << 8) | 0x1f, loc));
}
inline unsigned __ballot_sync(unsigned mask, int pred, const cuda_emu::Loc& loc = cuda_emu::Loc::current()) {
  return cuda_emu::vote(mask, 0, pred, loc);
}
inline int __any_sync(unsigned mask, int pred, const cuda_emu::Loc& loc = cuda_emu::Loc::current()) {
  return int(cuda_emu::vote(mask, 1, pred, loc));
}
inline int __all_sync(unsigned mask, int pred, const cuda_emu::Loc& loc = cuda_emu::Loc::current()) {
  return int(cuda_emu::vote(mask, 2, pred, loc));
}
inline unsigned __activemask() { return cuda_emu::activemask(); }
template <class T>
inline unsigned __match_any_sync(unsigned mask, T value, const cuda_emu::Loc& loc = cuda_emu::Loc::current()) {
  return cuda_emu::match_any(mask, cuda_emu::to_bits64(value), loc);
}
template <class T>
inline unsigned __match_all_sync(unsigned mask, T value, int* pred,
                                 const cuda_emu::Loc& loc = cuda_emu::Loc::current()) {
  return cuda_emu::match_all(mask, cuda_emu::to_bits64(value), pred, loc);
}
inline unsigned __reduce_add_sync(unsigned mask, unsigned v, const cuda_emu::Loc& loc = cuda_emu::Loc::current()) {
  return cuda_emu::reduce_sync(mask, 0, v, false, loc);
}
inline int __reduce_add_sync(unsigned mask, int v, const cuda_emu::Loc& loc = cuda_emu::Loc::current()) {
  return int(cuda_emu::reduce_sync(mask, 0, unsigned(v), true, loc));
}
inline unsigned __reduce_min_sync(unsigned mask, unsigned v, const cuda_emu::Loc& loc = cuda_emu::Loc::current()) {
  return cuda_emu::reduce_sync(mask, 1, v, false, loc);
}
inline int __reduce_min_sync(unsigned mask, int v, const cuda_emu::Loc& loc = cuda_emu::Loc::current()) {
  return int(cuda_emu::reduce_sync(mask, 1, unsigned(v), true, loc));
}
inline unsigned __reduce_max_sync(unsigned mask, unsigned v, const cuda_emu::Loc& loc = cuda_emu::Loc::current()) {
  return cuda_emu::reduce_sync(mask, 2, v, false, loc);
}
inline int __reduce_max_sync(unsigned mask, int v, const cuda_emu::Loc& loc = cuda_emu::Loc::current()) {
  return int(cuda_emu::reduce_sync(mask, 2, unsigned(v), true, loc));
}
inline unsigned __reduce_and_sync(unsigned mask, unsigned v, const cuda_emu::Loc& loc = cuda_emu::Loc::current()) {
  return cuda_emu::reduce_sync(mask, 3, v, false, loc);
}
inline unsigned __reduce_or_sync(unsigned mask, unsigned v, const cuda_emu::Loc& loc = cuda_emu::Loc::current()) {
  return cuda_emu::reduce_sync(mask, 4, v, false, loc);
}
inline unsigned __reduce_xor_sync(unsigned mask, unsigned v, const cuda_emu::Loc& loc = cuda_emu::Loc::current()) {
  return cuda_emu::reduce_sync(mask, 5, v, false, loc);
}

// ---- memory ------------------------------------------------------------------------------------------------
// One OS thread runs every CUDA thread and never switches inside an atomic, so plain read-modify-writes are
// atomic; the types are CUDA's overloads (nvcc rejects e.g. atomicAdd on a `long`).
namespace cuda_emu {
template <class T>
constexpr bool kAtomicInt = std::is_same_v<T, int> || std::is_same_v<T, unsigned> ||
                            std::is_same_v<T, unsigned long long> || std::is_same_v<T, long long>;
template <class T>
constexpr bool kAtomicArith = kAtomicInt<T> || std::is_same_v<T, float> || std::is_same_v<T, double>;
}  // namespace cuda_emu
namespace cuda_emu {
// The read-modify-write of every atomic*: under ThreadSanitizer (the racecheck build, -fsanitize=thread) a real atomic,
// so that it sees atomics as such (two threads' atomicAdd on one word do not race).
template <class T, class F>
inline T atomic_update(T* p, F f) {
#if defined(__SANITIZE_THREAD__)
  T old;
  __atomic_load(p, &old, __ATOMIC_RELAXED);
  T desired;
  do {
    desired = f(old);
  } while (!__atomic_compare_exchange(p, &old, &desired, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
  return old;
#else
  const T old = *p;
  *p = f(old);
  return old;
#endif
}
}  // namespace cuda_emu
template <class T, class U>
inline T atomicAdd(T* p, U v) {
  static_assert(cuda_emu::kAtomicArith<T>, "no CUDA atomicAdd for this type");
  return cuda_emu::atomic_update(p, [&](T old) { return T(old + T(v)); });
}
template <class T, class U>
inline T atomicSub(T* p, U v) {
  static_assert(std::is_same_v<T, int> || std::is_same_v<T, unsigned>, "no CUDA atomicSub for this type");
  return cuda_emu::atomic_update(p, [&](T old) { return T(old - T(v)); });
}
template <class T, class U>
inline T atomicMin(T* p, U v) {
  static_assert(cuda_emu::kAtomicInt<T>, "no CUDA atomicMin for this type");
  return cuda_emu::atomic_update(p, [&](T old) { return T(v) < old ? T(v) : old; });
}
template <class T, class U>
inline T atomicMax(T* p, U v) {
  static_assert(cuda_emu::kAtomicInt<T>, "no CUDA atomicMax for this type");
  return cuda_emu::atomic_update(p, [&](T old) { return T(v) > old ? T(v) : old; });
}
template <class T, class U>
inline T atomicExch(T* p, U v) {
  static_assert(cuda_emu::kAtomicInt<T> || std::is_same_v<T, float>, "no CUDA atomicExch for this type");
  return cuda_emu::atomic_update(p, [&](T) { return T(v); });
}
template <class T, class U, class V>
inline T atomicCAS(T* p, U compare, V v) {
  static_assert(cuda_emu::kAtomicInt<T> || std::is_same_v<T, unsigned short>, "no CUDA atomicCAS for this type");
  return cuda_emu::atomic_update(p, [&](T old) { return old == T(compare) ? T(v) : old; });
}
template <class T, class U>
inline T atomicAnd(T* p, U v) {
  static_assert(cuda_emu::kAtomicInt<T>, "no CUDA atomicAnd for this type");
  return cuda_emu::atomic_update(p, [&](T old) { return T(old & T(v)); });
}
template <class T, class U>
inline T atomicOr(T* p, U v) {
  static_assert(cuda_emu::kAtomicInt<T>, "no CUDA atomicOr for this type");
  return cuda_emu::atomic_update(p, [&](T old) { return T(old | T(v)); });
}
template <class T, class U>
inline T atomicXor(T* p, U v) {
  static_assert(cuda_emu::kAtomicInt<T>, "no CUDA atomicXor for this type");
  return cuda_emu::atomic_update(p, [&](T old) { return T(old ^ T(v)); });
}
inline unsigned atomicInc(unsigned* p, unsigned limit) {
  return cuda_emu::atomic_update(p, [&](unsigned old) { return old >= limit ? 0u : old + 1u; });
}
inline unsigned atomicDec(unsigned* p, unsigned limit) {
  return cuda_emu::atomic_update(p, [&](unsigned old) { return (old == 0u || old > limit) ? limit : old - 1u; });
}

namespace cuda_emu {
void acquire_fences();  // scheduler.cpp: racecheck orders the calling thread after every __threadfence so far
void fence_yield();  // scheduler.cpp: with several resident blocks, another one runs (CUDA_EMU_RESIDENT)
void spin_yield(const Loc& loc);
}  // namespace cuda_emu
// A fence publishes this thread's writes to other blocks: with several resident blocks (CUDA_EMU_RESIDENT) another
// one runs here, so that protocols between blocks interleave.
inline void __threadfence() {
  std::atomic_signal_fence(std::memory_order_seq_cst);
  cuda_emu::fence_yield();
}
inline void __threadfence_block() { std::atomic_signal_fence(std::memory_order_seq_cst); }
inline void __threadfence_system() { std::atomic_signal_fence(std::memory_order_seq_cst); }

template <class T>
inline T __ldg(const T* p) {
  return *p;
}
template <class T>
inline T __ldcg(const T* p) {
  return *p;
}
template <class T>
inline T __ldca(const T* p) {
  return *p;
}
template <class T>
inline T __ldcs(const T* p) {
  return *p;
}
template <class T>
inline T __ldlu(const T* p) {
  return *p;
}
template <class T>
inline T __ldcv(const T* p) {
  return *p;
}
template <class T>
inline void __stcg(T* p, T v) {
  *p = v;
}
template <class T>
inline void __stcs(T* p, T v) {
  *p = v;
}
template <class T>
inline void __stwb(T* p, T v) {
  *p = v;
}
template <class T>
inline void __stwt(T* p, T v) {
  *p = v;
}

inline size_t __cvta_generic_to_shared(const void* p, const cuda_emu::Loc& loc = cuda_emu::Loc::current()) {
  return cuda_emu::shared_offset(p, loc);
}
inline unsigned __isShared(const void* p) { return cuda_emu::is_shared(p) ? 1u : 0u; }
inline unsigned __isGlobal(const void* p) { return cuda_emu::is_shared(p) ? 0u : 1u; }

// ---- integer and bit intrinsics ----------------------------------------------------------------------------
inline int __popc(unsigned x) { return std::popcount(x); }
inline int __popcll(unsigned long long x) { return std::popcount(x); }
inline int __clz(int x) { return std::countl_zero(unsigned(x)); }
inline int __clzll(long long x) { return std::countl_zero((unsigned long long)x); }
inline int __ffs(int x) { return x == 0 ? 0 : std::countr_zero(unsigned(x)) + 1; }
inline int __ffsll(long long x) { return x == 0 ? 0 : std::countr_zero((unsigned long long)x) + 1; }
inline unsigned __brev(unsigned x) {
  unsigned r = 0;
  for (int i = 0; i < 32; ++i) r |= ((x >> i) & 1u) << (31 - i);
  return r;
}
inline unsigned __umulhi(unsigned a, unsigned b) { return unsigned((uint64_t(a) * b) >> 32); }
inline int __mulhi(int a, int b) { return int((int64_t(a) * b) >> 32); }
namespace cuda_emu {
__extension__ typedef __int128 i128;
__extension__ typedef unsigned __int128 u128;
}  // namespace cuda_emu
inline unsigned long long __umul64hi(unsigned long long a, unsigned long long b) {
  return (unsigned long long)(cuda_emu::u128(a) * b >> 64);
}
inline long long __mul64hi(long long a, long long b) { return (long long)(cuda_emu::i128(a) * b >> 64); }
inline int __mul24(int a, int b) { return int(int64_t(a << 8 >> 8) * (b << 8 >> 8)); }
inline unsigned __umul24(unsigned a, unsigned b) { return (a & 0xffffffu) * (b & 0xffffffu); }
inline unsigned __funnelshift_l(unsigned lo, unsigned hi, unsigned s) {
  const uint64_t v = (uint64_t(hi) << 32 | lo) << (s & 31);
  return unsigned(v >> 32);
}
inline unsigned __funnelshift_r(unsigned lo, unsigned hi, unsigned s) {
  const uint64_t v = (uint64_t(hi) << 32 | lo) >> (s & 31);
  return unsigned(v);
}
inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
  const uint64_t v = uint64_t(y) << 32 | x;
  unsigned r = 0;
  for (int i = 0; i < 4; ++i) r |= unsigned((v >> (8 * ((s >> (4 * i)) & 7))) & 0xff) << (8 * i);
  return r;
}

inline float __int_as_float(int x) { return std::bit_cast<float>(x); }
inline int __float_as_int(float x) { return std::bit_cast<int>(x); }
inline float __uint_as_float(unsigned x) { return std::bit_cast<float>(x); }
inline unsigned __float_as_uint(float x) { return std::bit_cast<unsigned>(x); }
inline double __longlong_as_double(long long x) { return std::bit_cast<double>(x); }
inline long long __double_as_longlong(double x) { return std::bit_cast<long long>(x); }

// CUDA's global min/max overloads (device code calls them unqualified).
template <class A, class B>
requires(std::is_arithmetic_v<A>&& std::is_arithmetic_v<B>) inline constexpr std::common_type_t<A, B> min(A a, B b) {
  using C = std::common_type_t<A, B>;
  if constexpr (std::is_floating_point_v<C>)
    return std::fmin(C(a), C(b));
  else
    return C(b) < C(a) ? C(b) : C(a);
}
template <class A, class B>
requires(std::is_arithmetic_v<A>&& std::is_arithmetic_v<B>) inline constexpr std::common_type_t<A, B> max(A a, B b) {
  using C = std::common_type_t<A, B>;
  if constexpr (std::is_floating_point_v<C>)
    return std::fmax(C(a), C(b));
  else
    return C(a) < C(b) ? C(b) : C(a);
}

// ---- floating-point intrinsics -----------------------------------------------------------------------------
// The IEEE-rounded ones are exact; the fast approximations (__expf, __logf, ...) are computed as the hardware
// defines them (ex2/lg2 of a scaled argument) but at host accuracy, which is tighter than the GPU's.
inline float __fadd_rn(float a, float b) { return cuda_emu::no_contract(a + b); }
inline float __fsub_rn(float a, float b) { return cuda_emu::no_contract(a - b); }
inline float __fmul_rn(float a, float b) { return cuda_emu::no_contract(a * b); }
inline float __fdiv_rn(float a, float b) { return cuda_emu::no_contract(a / b); }
inline float __frcp_rn(float a) { return cuda_emu::no_contract(1.0f / a); }
inline float __fsqrt_rn(float a) { return std::sqrt(a); }
inline float __frsqrt_rn(float a) { return cuda_emu::no_contract(1.0f / std::sqrt(a)); }
inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }
inline float __fmaf_rz(float a, float b, float c) { return std::fma(a, b, c); }
inline double __dadd_rn(double a, double b) { return cuda_emu::no_contract(a + b); }
inline double __dsub_rn(double a, double b) { return cuda_emu::no_contract(a - b); }
inline double __dmul_rn(double a, double b) { return cuda_emu::no_contract(a * b); }
inline double __ddiv_rn(double a, double b) { return cuda_emu::no_contract(a / b); }
inline double __drcp_rn(double a) { return cuda_emu::no_contract(1.0 / a); }
inline double __dsqrt_rn(double a) { return std::sqrt(a); }
inline double __fma_rn(double a, double b, double c) { return std::fma(a, b, c); }
inline float __fdividef(float a, float b) { return a / b; }
inline float fdividef(float a, float b) { return a / b; }
inline float __expf(float x) { return std::exp2(x * 1.4426950408889634f); }
inline float __exp10f(float x) { return std::exp2(x * 3.3219280948873622f); }
inline float __logf(float x) { return std::log2(x) * 0.6931471805599453f; }
inline float __log2f(float x) { return std::log2(x); }
inline float __log10f(float x) { return std::log2(x) * 0.3010299956639812f; }
inline float __powf(float a, float b) { return std::exp2(b * std::log2(a)); }
inline float __sinf(float x) { return std::sin(x); }
inline float __cosf(float x) { return std::cos(x); }
inline float __tanf(float x) { return std::tan(x); }
inline void __sincosf(float x, float* s, float* c) {
  *s = std::sin(x);
  *c = std::cos(x);
}
inline float __saturatef(float x) { return x > 0.0f ? (x < 1.0f ? x : 1.0f) : 0.0f; }
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline double rsqrt(double x) { return 1.0 / std::sqrt(x); }
inline float rcbrtf(float x) { return 1.0f / std::cbrt(x); }
inline float exp10f(float x) { return std::pow(10.0f, x); }
inline float normcdff(float x) { return 0.5f * std::erfc(-x * 0.70710678118654752f); }
inline double normcdf(double x) { return 0.5 * std::erfc(-x * 0.70710678118654752); }
inline int __float2int_rn(float x) { return int(std::nearbyint(x)); }
inline int __float2int_rz(float x) { return int(x); }
inline int __float2int_rd(float x) { return int(std::floor(x)); }
inline int __float2int_ru(float x) { return int(std::ceil(x)); }
inline unsigned __float2uint_rn(float x) { return unsigned(std::nearbyint(x)); }
inline unsigned __float2uint_rz(float x) { return unsigned(x); }
inline float __int2float_rn(int x) { return float(x); }
inline float __uint2float_rn(unsigned x) { return float(x); }
inline long long __float2ll_rn(float x) { return (long long)std::nearbyint(x); }
inline float __double2float_rn(double x) { return float(x); }
inline int __double2int_rn(double x) { return int(std::nearbyint(x)); }

// ---- clocks ------------------------------------------------------------------------------------------------
namespace cuda_emu {
long long clock_ns();
}
inline long long clock64() { return cuda_emu::clock_ns(); }
inline unsigned long long __globaltimer() { return (unsigned long long)cuda_emu::clock_ns(); }
// A thread that sleeps is spinning on something another thread or block must do: the others of its block run
// first; once every runnable thread of the block spins, another resident block runs (CUDA_EMU_RESIDENT), and with
// none that could, the emulator stops the run (scheduler.cpp: spin_yield).
inline void __nanosleep(unsigned, const cuda_emu::Loc& loc = cuda_emu::Loc::current()) { cuda_emu::spin_yield(loc); }

// The transformer puts this at the top of every __global__ function body: records the kernel's name for
// messages and checks __launch_bounds__ (CUDA refuses a launch with more threads than the bound).
#define CUDA_EMU_KERNEL_ENTRY(...) ::cuda_emu::kernel_entry(__PRETTY_FUNCTION__, ::cuda_emu::launch_bound(__VA_ARGS__))
namespace cuda_emu {
// __launch_bounds__(max_threads[, min_blocks[, max_blocks_per_cluster]]): the first is the one a launch must meet.
template <class... Rest>
constexpr unsigned launch_bound(long long max_threads, Rest...) {
  return unsigned(max_threads);
}
}  // namespace cuda_emu
