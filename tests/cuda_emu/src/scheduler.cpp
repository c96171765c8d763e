// The emulator's execution engine: launches, blocks, one fiber per CUDA thread, block barriers, warp
// collectives, shared memory, and the PTX operations (ldmatrix, mma, cp.async; sm_90a: mbarrier, TMA, wgmma).
//
// Scheduling: the fibers of a block run one at a time on one OS thread. A fiber runs until it waits (block
// barrier, warp collective) or exits, then switches straight to the next runnable fiber in the block's run
// order (forward for even blocks, reverse for odd ones by default: a missing barrier shows in one order or
// the other). The thread that completes a barrier or collective does the work for all and runs on. A fiber
// that has never run is started from the scheduler's own stack, which also takes back the stacks of
// exited fibers, so a block whose threads never wait needs only one stack. A thread that spins (__nanosleep)
// lets the block's other runnable threads go first. Blocks run one after another by default; with
// CUDA_EMU_RESIDENT=N, N blocks are resident at once (each with its own fibers and shared memory, E.b the
// running one) and take turns from the scheduler's stack, a block yielding at __threadfence and when every
// runnable thread of it spins, so that blocks waiting for each other (attention v3's dQ turns) really wait.
#include <signal.h>
#if defined(__F16C__) || defined(__AVX__)
#include <immintrin.h>
#endif
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <type_traits>

#include "internal.h"

#if CUDA_EMU_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif
#if CUDA_EMU_TSAN
#include <sanitizer/tsan_interface.h>
extern "C" {
void __tsan_read_range(void* addr, unsigned long size);
void __tsan_write_range(void* addr, unsigned long size);
void __tsan_ignore_thread_begin();
void __tsan_ignore_thread_end();
}
#endif

uint3 threadIdx;
uint3 blockIdx;
dim3 blockDim;
dim3 gridDim;

// ---- context switch ----------------------------------------------------------------------------------------
#if !CUDA_EMU_UCONTEXT
// cuda_emu_switch(save, load): pushes the callee-saved registers, stores the stack pointer in *save, loads
// `load` and pops the registers of the context saved there. A new fiber's stack holds zeroed registers and
// the address of cuda_emu_trampoline, which calls cuda_emu_fiber_main (never returns).
extern "C" void cuda_emu_switch(void** save, void* load);
extern "C" void cuda_emu_trampoline();
asm(R"(
    .text
    .p2align 4
    .globl cuda_emu_switch
    .hidden cuda_emu_switch
    .type cuda_emu_switch,@function
cuda_emu_switch:
    .cfi_startproc
    endbr64
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .cfi_endproc
    .size cuda_emu_switch, .-cuda_emu_switch

    .p2align 4
    .globl cuda_emu_trampoline
    .hidden cuda_emu_trampoline
    .type cuda_emu_trampoline,@function
cuda_emu_trampoline:
    .cfi_startproc
    .cfi_undefined rip
    endbr64
    xorl %ebp, %ebp
    call cuda_emu_fiber_main
    ud2
    .cfi_endproc
    .size cuda_emu_trampoline, .-cuda_emu_trampoline
)");
#endif
extern "C" [[noreturn]] void cuda_emu_fiber_main();

#if CUDA_EMU_TSAN
// racecheck: the kernels' volatile loads and stores (compiled with --param=tsan-distinguish-volatile=1) as PTX has
// them: strong operations, like relaxed atomics, which race with no other strong access (a flag spun on with
// volatile loads and set with atomicExch), only with plain ones. ThreadSanitizer records each as a relaxed atomic of
// its size (a store as an atomic add of 0 just before the store itself: one OS thread runs every CUDA thread).
extern "C" {
char __tsan_atomic8_load(const volatile char* a, int mo);
short __tsan_atomic16_load(const volatile short* a, int mo);
int __tsan_atomic32_load(const volatile int* a, int mo);
long __tsan_atomic64_load(const volatile long* a, int mo);
char __tsan_atomic8_fetch_add(volatile char* a, char v, int mo);
short __tsan_atomic16_fetch_add(volatile short* a, short v, int mo);
int __tsan_atomic32_fetch_add(volatile int* a, int v, int mo);
long __tsan_atomic64_fetch_add(volatile long* a, long v, int mo);
constexpr int kRelaxed = 0;
void __tsan_volatile_read1(void* p) { __tsan_atomic8_load(static_cast<char*>(p), kRelaxed); }
void __tsan_volatile_read2(void* p) { __tsan_atomic16_load(static_cast<short*>(p), kRelaxed); }
void __tsan_volatile_read4(void* p) { __tsan_atomic32_load(static_cast<int*>(p), kRelaxed); }
void __tsan_volatile_read8(void* p) { __tsan_atomic64_load(static_cast<long*>(p), kRelaxed); }
void __tsan_volatile_read16(void* p) {
  __tsan_atomic64_load(static_cast<long*>(p), kRelaxed);
  __tsan_atomic64_load(static_cast<long*>(p) + 1, kRelaxed);
}
void __tsan_volatile_write1(void* p) { __tsan_atomic8_fetch_add(static_cast<char*>(p), 0, kRelaxed); }
void __tsan_volatile_write2(void* p) { __tsan_atomic16_fetch_add(static_cast<short*>(p), 0, kRelaxed); }
void __tsan_volatile_write4(void* p) { __tsan_atomic32_fetch_add(static_cast<int*>(p), 0, kRelaxed); }
void __tsan_volatile_write8(void* p) { __tsan_atomic64_fetch_add(static_cast<long*>(p), 0, kRelaxed); }
void __tsan_volatile_write16(void* p) {
  __tsan_atomic64_fetch_add(static_cast<long*>(p), 0, kRelaxed);
  __tsan_atomic64_fetch_add(static_cast<long*>(p) + 1, 0, kRelaxed);
}
}
#endif

namespace cuda_emu {
namespace {

constexpr size_t kPage = 4096;

struct Stack {
  char* lo = nullptr;  // usable [lo, lo + size); one PROT_NONE guard page below
  size_t size = 0;
};

struct Context {
#if CUDA_EMU_UCONTEXT
  ucontext_t uc;
#else
  void* sp = nullptr;
#endif
  const void* stack_lo = nullptr;  // for AddressSanitizer's fiber annotations
  size_t stack_size = 0;
  void* fake_stack = nullptr;
  void* tsan = nullptr;  // racecheck (CUDA_EMU_TSAN): ThreadSanitizer's fiber of this CUDA thread, or the host's
};

enum State : uint8_t { kNew, kReady, kBlockWait, kWarpWait, kDone };

struct Copy {
  unsigned char* dst;
  const unsigned char* src;
  uint32_t cp_size, src_size;
};

// wgmma.mma_async issued by one lane, performed at the wgmma.wait_group that covers it
struct Wgmma {
  int n = 0, ab_type = 0;
  uint64_t desc_a = 0, desc_b = 0;
  bool mn_a = false, mn_b = false;  // imm-trans-a / imm-trans-b: the operand is MN-major
  bool scale_d = true;
  Loc loc;
  std::vector<float*> d;  // this lane's n / 2 accumulators
};

// A TMA tile store issued (cp.async.bulk.tensor, shared -> global), not yet performed.
struct TmaStore {
  uint32_t src;
  TensorMap map;
  int32_t c[kTensorMapMaxRank];
  Loc loc;
};

struct Fiber {
  Context ctx;
  Stack* stack = nullptr;
  uint3 tid{};
  int index = 0;  // linear thread index in the block
  int pos = 0;    // position in the run order
  State state = kNew;
  Loc wait_loc;
  const char* wait_what = "";
  uint32_t wait_mask = 0;
  alignas(16) unsigned char in[48];   // this lane's operands of a warp collective
  alignas(16) unsigned char out[16];  // and its result
  std::vector<Copy> copies;           // cp.async issued, not yet performed
  std::vector<size_t> group_ends;     // copies [.., group_ends[i]) form committed group i
  std::vector<TmaStore> bulk_stores;  // TMA stores issued, not yet performed
  std::vector<size_t> bulk_group_ends;  // bulk_stores [.., bulk_group_ends[i]) form committed bulk group i
  std::vector<Wgmma> wgmmas;          // wgmma.mma_async issued, not yet performed
  std::vector<size_t> wgmma_group_ends;
  bool wgmma_fenced = false;  // a wgmma.fence since the kernel's start or this thread's last wgmma.wait_group
  std::map<uint32_t, uint64_t> seen_phases;  // per mbarrier: the phases completed when this thread last saw one
  uint64_t failed_waits = 0;                 // consecutive mbarrier.try_wait that found the phase incomplete
  bool spinning = false;                     // called __nanosleep in this round of the block's spinners (spin_yield)
  uint32_t cp_seq = 0;                       // CUDA_EMU_STATS: cp.async issued by this thread in this block
  uint32_t st_seq = 0;                       // CUDA_EMU_STATS: st.shared.v2.f32 issued by this thread in this block
  bool tsan_quiet = false;                   // racecheck: ThreadSanitizer ignores its accesses (TsanQuiet)
};

// An mbarrier object (PTX ISA "mbarrier"): the phase completes when every expected arrival has come and the
// transaction count is back to 0; then the phase parity flips and the arrivals are expected again.
struct Mbarrier {
  uint32_t expected = 0, pending = 0;
  int64_t tx = 0;
  uint32_t phase = 0;      // parity of the current (incomplete) phase
  uint64_t completed = 0;  // phases completed so far
  char sync[4] = {};       // racecheck: phase k's arrivals release, its waiters acquire, at sync[k % 4]
};
// Which fill wrote a 128-byte line of shared memory last: TMA completing phase `phase` (1-based count) of
// the mbarrier at `bar`. A wgmma reading the line from a thread that has seen fewer phases of that barrier
// complete reads a later fill than the one it waited for: the stage was refilled under it.
struct FillTag {
  uint32_t bar = 0;
  uint64_t phase = 0;
};
// A TMA tile load issued, not yet performed (until a thread waits on its mbarrier).
struct TmaLoad {
  uint32_t token;  // racecheck: the issuing thread released it; the thread that performs the load acquires it
  uint32_t dst, bar;
  uint64_t phase;  // the phase of `bar` it completes (1-based)
  TensorMap map;
  int32_t c[kTensorMapMaxRank];
  uint16_t off[kTensorMapMaxRank - 2];  // an im2col load's offsets (dimension 1 first)
  Loc loc;
};

struct Fiber;
using Compute = void (*)(Fiber* lanes, uint32_t mask);

struct Pending {
  uint32_t mask = 0, arrived = 0;
  int kind = 0;
  bool aligned = false;
  const char* what = "";
  Loc loc;
  Compute compute = nullptr;
  uint8_t sync = 0;  // racecheck: the arriving lanes release, the released ones acquire, at Warp::sync[this]
};

constexpr int kMaxPending = 32;

struct Warp {
  uint32_t exists = 0, exited = 0;
  Pending pending[kMaxPending];
  int npending = 0;
  uint8_t next_sync = 0;  // racecheck: the collectives of the warp take sync[] in turn
  char sync[64] = {};
};

// The shared-memory window: [guard][dynamic area][guard][static area][guard]. 32-bit shared addresses
// (cvta.to.shared, ldmatrix, cp.async) are offsets from its start.
constexpr size_t kDynArea = 232 * 1024;
constexpr size_t kStaticArea = 64 * 1024;
constexpr size_t kWindow = kPage + kDynArea + kPage + kStaticArea + kPage;
constexpr size_t kDynBegin = kPage, kDynEnd = kDynBegin + kDynArea;
constexpr size_t kStaticBegin = kDynEnd + kPage;
constexpr size_t kRedzone = 16;

// A store of the k-th cp.async (or st.shared.v2.f32) of each lane of a warp (CUDA_EMU_STATS).
struct CpInstr {
  uint32_t dst[32];
  int size;
};

// One block of a launch and everything it owns: its threads (fibers), barriers, shared memory and sm_90a state.
// A launch keeps up to CUDA_EMU_RESIDENT of them resident at once (one by default: blocks one after another),
// each in a slot of its own that later blocks reuse; E.b is the one running.
struct Block {
  uint3 idx{};
  uint64_t block_linear = 0;
  bool reverse = false;
  bool started = false;  // a fiber of it has run
  std::vector<Fiber> fibers;
  std::vector<int> order;  // order[pos] = thread index
  std::vector<Warp> warps;
  Fiber* cur = nullptr;  // the running fiber, or the one that yielded the block
  int ndone = 0;
  int bar_arrived = 0, bar_first = 0;
  Loc bar_loc;
  int bar_op = -1, bar_acc = 0, bar_result = 0;
  // racecheck (CUDA_EMU_TSAN): what ThreadSanitizer is told. The host releases `sync_start` once the block is set up,
  // every thread acquires it when it starts and releases `sync_end` when it exits, which the host acquires; the
  // arrivals at __syncthreads number `bar_gen` release bar_sync[bar_gen % 4] and the woken threads acquire it. Each
  // thread index has a fiber of ThreadSanitizer's and a stack of its own, kept for the blocks the slot runs later.
  uint64_t bar_gen = 0;
  char bar_sync[4] = {}, sync_start = 0, sync_end = 0;
  std::vector<void*> tsan_fibers;
  std::vector<Stack*> own_stacks;
  // shared memory
  unsigned char* window = nullptr;
  size_t dyn_bytes = 0, dyn_start = kDynEnd, protected_below = kDynEnd;
  size_t static_top = 0;
  std::vector<std::pair<const void*, size_t>> statics;  // key -> offset in the window
  // sm_90a state of the block
  std::map<uint32_t, Mbarrier> mbarriers;  // by shared address
  std::vector<TmaLoad> tma_pending;
  std::map<uint32_t, FillTag> fills;  // by 128-byte line of shared memory
  // CUDA_EMU_STATS
  std::vector<std::vector<CpInstr>> cp_by_warp;  // [warp][k]
  std::vector<std::vector<CpInstr>> st_by_warp;  // [warp][k]
};

struct Exec {
  std::mutex mutex;
  bool in_launch = false;
  // launch
  Loc launch_loc;
  const char* kernel_name = nullptr;
  const void* kernel = nullptr;
  // CUDA_EMU_STATS: shared-memory wavefronts of this launch's ldmatrix instructions and cp.async writes, and
  // the fewest possible. cp.async is per thread: the k-th cp.async of each lane of a warp counts as one warp
  // instruction (the kernels here issue them converged, with a zero-fill flag instead of a branch).
  bool stats = false;
  // The same for st.shared.v2.f32 (asm stores, per thread like cp.async: the k-th of each lane is one warp store).
  uint64_t ldm_wavefronts = 0, ldm_ideal = 0, cp_wavefronts = 0, cp_ideal = 0, st_wavefronts = 0, st_ideal = 0;
  void (*thunk)(void*) = nullptr;
  void* ctx = nullptr;
  int n = 0;  // threads per block
  // blocks: the running one, and the slots of the resident ones (CUDA_EMU_RESIDENT, read at every launch)
  Block* b = nullptr;
  std::vector<Block*> slots;
  int resident = 1;
  bool dispatch_reverse = false;  // CUDA_EMU_DISPATCH=reverse
  uint64_t spin_rounds = 0;  // rounds in which every runnable thread of the running block spun, since progress
  Context main;
  std::vector<Stack*> free_stacks;
  Stack* zombie = nullptr;
  bool from_main = false;  // the switch in progress leaves the scheduler's own stack
  size_t stack_bytes = 0;
  std::string order_mode;
  bool warp_greedy = false;  // CUDA_EMU_SCHEDULE=warp: a blocked thread hands over to its own warp first
  uint64_t seed = 1;
};

// Never destroyed: fibers, stacks and the shared window live until the process ends (static destructors may run
// while another thread still launches). E.b starts as an idle block, so that E.b->cur is null outside kernels.
Exec& E = *[] {
  auto* e = new Exec;
  e->b = new Block;
  e->slots.push_back(e->b);
  return e;
}();
std::atomic<unsigned long long> g_tma_stores{0};  // tma_stores()
std::atomic<unsigned long long> g_tma_im2col_loads{0};  // tma_im2col_loads()
std::mutex g_prefetch_mutex;
std::set<uintptr_t>& g_prefetched = *new std::set<uintptr_t>;  // prefetched_lines() (never destroyed, as E)
std::atomic<unsigned long long> g_block_yields{0};  // block_yields()

// ---- racecheck: ThreadSanitizer told about the CUDA threads (CUDA_EMU_TSAN, docs/cuda-emulator.md) -----------
// The kernels, the tests and the oracle are compiled with -fsanitize=thread, this runtime is not: ThreadSanitizer
// sees the kernels' own loads and stores, and from here only what the calls below tell it. Every CUDA thread is a
// fiber of its own to it, switched to without synchronisation, so two threads' accesses to the same bytes race
// unless a happens-before edge the emulator reports orders them: __syncthreads, a warp collective (each treated as
// __syncwarp of its lanes), an mbarrier phase (arrivals and complete_tx release, the waits that pass acquire),
// __threadfence (all fences of the process in one order), the start and the end of a block. The PTX operations
// performed here on the threads' behalf report their memory accesses: ldmatrix's rows, cp.async's and TMA's copies,
// st.shared, wgmma's operands.
#if CUDA_EMU_TSAN
// The emulator's own bookkeeping in a thread's name is not the thread's memory access: inside the entry points the
// kernels call, the thread's accesses are ignored (the library calls the runtime makes, memmove of its vectors and
// malloc, are intercepted even here), but for what tsan_read and tsan_write report. The flag is the running
// thread's (each thread is ignored or not on its own in ThreadSanitizer: a fiber's state), the host's outside kernels.
bool g_host_quiet = false;
bool& quiet_flag() { return E.b->cur ? E.b->cur->tsan_quiet : g_host_quiet; }
struct TsanQuiet {
  TsanQuiet() : flag_(quiet_flag()), owner_(!flag_) {
    if (owner_) {
      flag_ = true;
      __tsan_ignore_thread_begin();
    }
  }
  ~TsanQuiet() {
    if (owner_) {
      flag_ = false;
      __tsan_ignore_thread_end();
    }
  }
  TsanQuiet(const TsanQuiet&) = delete;
  TsanQuiet& operator=(const TsanQuiet&) = delete;

 private:
  bool& flag_;
  const bool owner_;
};
void tsan_release(const void* a) { __tsan_release(const_cast<void*>(a)); }
void tsan_acquire(const void* a) { __tsan_acquire(const_cast<void*>(a)); }
void tsan_read(const void* a, size_t n) {
  const bool quiet = quiet_flag();
  if (quiet) __tsan_ignore_thread_end();
  __tsan_read_range(const_cast<void*>(a), n);
  if (quiet) __tsan_ignore_thread_begin();
}
void tsan_write(void* a, size_t n) {
  const bool quiet = quiet_flag();
  if (quiet) __tsan_ignore_thread_end();
  __tsan_write_range(a, n);
  if (quiet) __tsan_ignore_thread_begin();
}
#else
void tsan_release(const void*) {}
void tsan_acquire(const void*) {}
void tsan_read(const void*, size_t) {}
void tsan_write(void*, size_t) {}
struct TsanQuiet {
  TsanQuiet() {}  // (user-provided: no unused-variable warning where it is declared)
};
#endif
char g_tsan_tokens[1024];  // TmaLoad::token
uint32_t g_tsan_next_token = 0;
char g_tsan_fence = 0;  // __threadfence

// ThreadSanitizer's fiber for thread `index` of block slot b (made once, kept), or null without CUDA_EMU_TSAN.
void* tsan_fiber(Block* b, int index) {
#if CUDA_EMU_TSAN
  if (b->tsan_fibers.size() <= size_t(index)) b->tsan_fibers.resize(size_t(index) + 1, nullptr);
  void*& f = b->tsan_fibers[size_t(index)];
  if (!f) {
    f = __tsan_create_fiber(0);
    size_t slot = 0;
    while (slot < E.slots.size() && E.slots[slot] != b) ++slot;
    const auto* name =
        new std::string("CUDA thread " + std::to_string(index) + " (block slot " + std::to_string(slot) + ")");
    __tsan_set_fiber_name(f, name->c_str());
  }
  return f;
#else
  (void)b, (void)index;
  return nullptr;
#endif
}

const char* short_file(const char* f) {
  const char* s = std::strstr(f, "/kernels/");
  if (!s) s = std::strstr(f, "/tests/");
  return s ? s + 1 : f;
}

bool same_loc(const Loc& a, const Loc& b) {
  return a.line() == b.line() && a.column() == b.column() &&
         (a.file_name() == b.file_name() || std::strcmp(a.file_name(), b.file_name()) == 0);
}

void print_context(FILE* out) {
  if (!E.in_launch) return;
  std::fprintf(out, "  kernel: %s\n", E.kernel_name ? E.kernel_name : "(not entered yet)");
  std::fprintf(out, "  launched at %s:%u with grid (%u,%u,%u), block (%u,%u,%u)\n",
               short_file(E.launch_loc.file_name()), E.launch_loc.line(), gridDim.x, gridDim.y, gridDim.z, blockDim.x,
               blockDim.y, blockDim.z);
  std::fprintf(out, "  block (%u,%u,%u)", blockIdx.x, blockIdx.y, blockIdx.z);
  if (E.b->cur)
    std::fprintf(out, ", thread (%u,%u,%u) (linear %d: warp %d, lane %d)", E.b->cur->tid.x, E.b->cur->tid.y, E.b->cur->tid.z,
                 E.b->cur->index, E.b->cur->index / 32, E.b->cur->index % 32);
  std::fprintf(out, "\n");
}

// ---- stacks and switching ------------------------------------------------------------------------------
size_t stack_bytes() {
  if (E.stack_bytes == 0) {
    size_t kb = CUDA_EMU_ASAN ? 512 : 128;
    if (const char* e = std::getenv("CUDA_EMU_STACK_KB")) kb = size_t(std::max(16L, std::atol(e)));
    E.stack_bytes = (kb * 1024 + kPage - 1) / kPage * kPage;
  }
  return E.stack_bytes;
}

Stack* take_stack() {
  if (!E.free_stacks.empty()) {
    Stack* s = E.free_stacks.back();
    E.free_stacks.pop_back();
    return s;
  }
  const size_t size = stack_bytes();
  void* m = mmap(nullptr, size + kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK,
                 -1, 0);
  if (m == MAP_FAILED) fatal("cannot map a %zu KiB fiber stack", size / 1024);
  mprotect(m, kPage, PROT_NONE);
  auto* s = new Stack;
  s->lo = static_cast<char*>(m) + kPage;
  s->size = size;
  return s;
}

// The stack of a thread that exited and switched away for good: back to the pool once we run elsewhere.
void recycle_zombie() {
  if (E.zombie) {
    E.free_stacks.push_back(E.zombie);
    E.zombie = nullptr;
  }
}

void switch_context(Context& from, Context& to, bool from_exits) {
#if CUDA_EMU_TSAN
  __tsan_switch_to_fiber(to.tsan, __tsan_switch_to_fiber_no_sync);
#endif
#if CUDA_EMU_ASAN
  __sanitizer_start_switch_fiber(from_exits ? nullptr : &from.fake_stack, to.stack_lo, to.stack_size);
#else
  (void)from_exits;
#endif
#if CUDA_EMU_UCONTEXT
  swapcontext(&from.uc, &to.uc);
#else
  cuda_emu_switch(&from.sp, to.sp);
#endif
#if CUDA_EMU_ASAN
  __sanitizer_finish_switch_fiber(from.fake_stack, nullptr, nullptr);
#endif
  recycle_zombie();
}

void make_current(Fiber* f) {
  E.b->cur = f;
  threadIdx = f->tid;
}

void start_fiber(Fiber* f) {
#if CUDA_EMU_TSAN
  // A stack of its own, kept: ThreadSanitizer would take another thread's frames on a reused stack for races.
  if (E.b->own_stacks.size() <= size_t(f->index)) E.b->own_stacks.resize(size_t(f->index) + 1, nullptr);
  Stack*& own = E.b->own_stacks[size_t(f->index)];
  if (!own) own = take_stack();
  f->stack = own;
#else
  f->stack = take_stack();
#endif
#if CUDA_EMU_ASAN
  // A reused stack still carries the poisoned redzones of the frames its last thread left without returning
  // (cuda_emu_fiber_main's, at the top).
  const size_t stale = std::min<size_t>(f->stack->size, 32 * 1024);
  __asan_unpoison_memory_region(f->stack->lo + f->stack->size - stale, stale);
#endif
  Context& c = f->ctx;
  c.stack_lo = f->stack->lo;
  c.stack_size = f->stack->size;
#if CUDA_EMU_UCONTEXT
  getcontext(&c.uc);
  c.uc.uc_stack.ss_sp = f->stack->lo;
  c.uc.uc_stack.ss_size = f->stack->size;
  c.uc.uc_link = nullptr;
  makecontext(&c.uc, reinterpret_cast<void (*)()>(cuda_emu_fiber_main), 0);
#else
  // [r15 r14 r13 r12 rbx rbp ret=trampoline]: after the pops and the ret the stack is 16-byte aligned for
  // the trampoline's call.
  auto* top = reinterpret_cast<uintptr_t*>(f->stack->lo + f->stack->size);
  uintptr_t* sp = top - 9;
  for (int i = 0; i < 6; ++i) sp[i] = 0;
  sp[6] = reinterpret_cast<uintptr_t>(&cuda_emu_trampoline);
  sp[7] = sp[8] = 0;
  c.sp = sp;
#endif
}

// The next runnable thread of the block after run-order position from_pos (skip_spinning: not one that has spun in
// this round, spin_yield), or null.
Fiber* next_runnable(int from_pos, bool skip_spinning = false) {
  const int n = E.n;
  for (int k = 1; k <= n; ++k) {
    int p = from_pos + k;
    if (p >= n) p -= n;
    Fiber* f = &E.b->fibers[size_t(E.b->order[size_t(p)])];
    if ((f->state == kReady || f->state == kNew) && !(skip_spinning && f->spinning)) return f;
  }
  return nullptr;
}

std::string thread_range(int a, int b) {
  char buf[64];
  if (a == b)
    std::snprintf(buf, sizeof buf, "thread %d", a);
  else
    std::snprintf(buf, sizeof buf, "threads %d-%d", a, b);
  return buf;
}

[[noreturn]] void deadlock() {
  std::fprintf(stderr, "cuda_emu: deadlock: no thread of the block can run\n");
  E.b->cur = nullptr;
  print_context(stderr);
  // Group consecutive threads in the same state at the same place.
  auto describe = [](const Fiber& f) {
    char buf[512];
    switch (f.state) {
      case kDone:
        return std::string("exited");
      case kBlockWait:
        std::snprintf(buf, sizeof buf, "wait in %s at %s:%u", f.wait_what, short_file(f.wait_loc.file_name()),
                      f.wait_loc.line());
        return std::string(buf);
      case kWarpWait:
        std::snprintf(buf, sizeof buf, "wait in %s (mask 0x%08x) at %s:%u", f.wait_what, f.wait_mask,
                      short_file(f.wait_loc.file_name()), f.wait_loc.line());
        return std::string(buf);
      default:
        return std::string("runnable");
    }
  };
  int start = 0;
  std::string d0 = describe(E.b->fibers[0]);
  for (int i = 1; i <= E.n; ++i) {
    const std::string di = i < E.n ? describe(E.b->fibers[size_t(i)]) : std::string();
    if (i == E.n || di != d0) {
      std::fprintf(stderr, "    %s: %s\n", thread_range(start, i - 1).c_str(), d0.c_str());
      start = i;
      d0 = di;
    }
  }
  std::fprintf(stderr,
               "  (CUDA requires every thread of the block at the same __syncthreads(), and every lane named in a "
               "warp collective's mask at the same collective)\n");
  std::fflush(stderr);
  std::abort();
}

// The next runnable lane of the current fiber's warp (CUDA_EMU_SCHEDULE=warp), or null.
Fiber* next_in_warp(const Fiber* me, bool skip_polling = false) {
  const int base = me->index - me->index % 32;
  for (int k = 1; k < 32; ++k) {
    const int i = base + (me->index % 32 + k) % 32;
    if (i >= E.n) continue;
    Fiber* f = &E.b->fibers[size_t(i)];
    if ((f->state == kReady || f->state == kNew) && !(skip_polling && f->failed_waits > 0)) return f;
  }
  return nullptr;
}

// The current fiber has set a wait state: run someone else until it is woken. With CUDA_EMU_SCHEDULE=warp
// its own warp goes first, so one warp runs as far ahead of the others as their barriers let it (a
// producer that refills a buffer before the other warps are done with it then overwrites it under them).
// From the current fiber `me` (its state already set) straight to `next` of the same block, started if new; returns
// when something switches back to `me` (and made it current).
void switch_to(Fiber* me, Fiber* next) {
  if (next->state == kNew) start_fiber(next);
  next->state = kReady;
  make_current(next);
  switch_context(me->ctx, next->ctx, false);
}

void wait_here() {
  Fiber* me = E.b->cur;
  Fiber* next = E.warp_greedy ? next_in_warp(me) : nullptr;
  if (!next) next = next_runnable(me->pos);
  if (!next) deadlock();
  switch_to(me, next);  // woken and switched back to: whoever switched here made us current
}

// CUDA_EMU_STATS: the wavefronts of the block's cp.async writes (and st.shared.v2.f32 stores). A warp's accesses
// of S bytes go through shared memory 128 / S lanes at a time (a phase); a phase takes as many wavefronts as the
// most distinct addresses on one bank group (address / S % (128 / S)), one when conflict-free.
void tally_writes(std::vector<std::vector<CpInstr>>& by_warp, uint64_t& wavefronts, uint64_t& ideal) {
  for (auto& per_warp : by_warp) {
    for (const CpInstr& in : per_warp) {
      const int lanes = 128 / in.size;
      for (int p0 = 0; p0 < 32; p0 += lanes) {
        uint32_t seen[32];
        int n = 0, per_group[32] = {};
        for (int l = p0; l < p0 + lanes; ++l) {
          const uint32_t a = in.dst[l];
          if (a == ~0u) continue;
          bool dup = false;
          for (int i = 0; i < n; ++i) dup = dup || seen[i] == a;
          if (dup) continue;
          seen[n++] = a;
          ++per_group[(a / uint32_t(in.size)) % uint32_t(lanes)];
        }
        if (n == 0) continue;
        wavefronts += uint64_t(*std::max_element(per_group, per_group + lanes));
        ideal += 1;
      }
    }
    per_warp.clear();
  }
}

// Records the shared-memory write of `size` bytes at `addr` as this thread's next per-thread write in `by_warp`.
void record_write(std::vector<std::vector<CpInstr>>& by_warp, uint32_t& seq, uint32_t addr, int size) {
  Fiber& f = *E.b->cur;
  auto& per_warp = by_warp[size_t(f.index / 32)];
  if (per_warp.size() <= seq) {
    CpInstr blank{};
    std::fill(std::begin(blank.dst), std::end(blank.dst), ~0u);
    blank.size = size;
    per_warp.resize(seq + 1, blank);
  }
  per_warp[seq].dst[f.index % 32] = addr;
  per_warp[seq].size = size;
  ++seq;
}

// Makes E.b block `linear` (E.b's storage: a slot) ready to run: its threads new, its barriers and sm_90a state
// empty, its run order drawn.
void init_block(uint64_t linear, uint3 idx) {
  E.b->block_linear = linear;
  E.b->idx = idx;
  E.b->started = false;
  E.b->cur = nullptr;
  const int n = E.n;
  E.b->ndone = 0;
  E.b->bar_arrived = 0;
  E.b->bar_op = -1;
  for (int i = 0; i < n; ++i) {
    Fiber& f = E.b->fibers[size_t(i)];
    f.state = kNew;
    f.copies.clear();
    f.group_ends.clear();
    f.wgmmas.clear();
    f.wgmma_group_ends.clear();
    f.wgmma_fenced = false;
    f.bulk_stores.clear();
    f.bulk_group_ends.clear();
    f.seen_phases.clear();
    f.failed_waits = 0;
    f.spinning = false;
    f.cp_seq = 0;
    f.st_seq = 0;
  }
  if (E.stats) E.b->cp_by_warp.resize(size_t((n + 31) / 32)), E.b->st_by_warp.resize(size_t((n + 31) / 32));
  E.b->mbarriers.clear();
  E.b->tma_pending.clear();
  E.b->fills.clear();
  for (Warp& w : E.b->warps) {
    w.exited = 0;
    w.npending = 0;
  }
  // The run order: CUDA_EMU_ORDER=forward, reverse, random (seeded by CUDA_EMU_SEED and the block), or by
  // default alternate (forward for even blocks, reverse for odd ones).
  E.b->reverse = E.order_mode == "reverse" || (E.order_mode == "alternate" && (E.b->block_linear & 1));
  for (int p = 0; p < n; ++p) E.b->order[size_t(p)] = E.b->reverse ? n - 1 - p : p;
  if (E.order_mode == "random") {
    uint64_t x = E.seed ^ (E.b->block_linear * 0x9e3779b97f4a7c15ull);
    for (int p = n - 1; p > 0; --p) {  // Fisher-Yates with splitmix64
      x += 0x9e3779b97f4a7c15ull;
      uint64_t z = x;
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
      z ^= z >> 31;
      std::swap(E.b->order[size_t(p)], E.b->order[size_t(z % uint64_t(p + 1))]);
    }
  }
  for (int p = 0; p < n; ++p) E.b->fibers[size_t(E.b->order[size_t(p)])].pos = p;
}

// Runs E.b from the scheduler's own stack until it is done or yields (block_yield): its first thread if it has
// not started, else the fiber that yielded. True when the block is done.
bool run_block() {
  Fiber* f = E.b->cur;
  if (!E.b->started) {
    E.b->started = true;
    f = next_runnable(E.n - 1);
    start_fiber(f);
  }
  f->state = kReady;
  make_current(f);
  E.from_main = true;
  switch_context(E.main, f->ctx, false);
  if (E.b->ndone != E.n) return false;  // yielded: E.b->cur resumes it (the fibers report deadlocks themselves)
  E.b->cur = nullptr;
  return true;
}

// From a fiber of E.b: lets the other resident blocks run (the launch loop picks the next), and returns when
// this block runs again.
void block_yield() {
  Fiber* me = E.b->cur;
  me->state = kReady;
  ++g_block_yields;
  switch_context(me->ctx, E.main, false);
  // the launch loop made us current again
}

// ---- shared memory ---------------------------------------------------------------------------------------
void protect(size_t begin, size_t end, int prot) {
  if (end > begin) mprotect(E.b->window + begin, end - begin, prot);
}

void setup_window(size_t dyn_bytes) {
  if (!E.b->window) {
    void* m = mmap(nullptr, kWindow, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) fatal("cannot map the shared-memory window");
    E.b->window = static_cast<unsigned char*>(m);
    protect(kStaticBegin, kStaticBegin + kStaticArea, PROT_READ | PROT_WRITE);
    E.b->protected_below = kDynEnd;
  }
  // The dynamic buffer ends where the guard page starts (128-byte aligned start, like nvcc's extern arrays);
  // the pages below it are inaccessible.
  E.b->dyn_bytes = dyn_bytes;
  E.b->dyn_start = dyn_bytes ? (kDynEnd - dyn_bytes) & ~size_t(127) : kDynEnd;
  const size_t below = E.b->dyn_start & ~(kPage - 1);
  if (below != E.b->protected_below) {
    protect(kDynBegin, below, PROT_NONE);
    protect(below, kDynEnd, PROT_READ | PROT_WRITE);
    E.b->protected_below = below;
  }
}

constexpr unsigned char kCanary = 0xa5;

void begin_block_smem() {
  E.b->static_top = 0;
  E.b->statics.clear();
  if (E.b->dyn_bytes) {
#if CUDA_EMU_ASAN
    __asan_unpoison_memory_region(E.b->window + E.b->protected_below, kDynEnd - E.b->protected_below);
#endif
    std::memset(E.b->window + E.b->dyn_start, 0xff, E.b->dyn_bytes);  // NaN in f32, f16, bf16; -1 in integers
    // The accessible bytes around the buffer (below it in its first page, above it up to the guard page)
    // hold a canary checked at the end of the block (poisoned instead under AddressSanitizer).
    std::memset(E.b->window + E.b->protected_below, kCanary, E.b->dyn_start - E.b->protected_below);
    std::memset(E.b->window + E.b->dyn_start + E.b->dyn_bytes, kCanary, kDynEnd - E.b->dyn_start - E.b->dyn_bytes);
#if CUDA_EMU_ASAN
    __asan_poison_memory_region(E.b->window + E.b->protected_below, E.b->dyn_start - E.b->protected_below);
    __asan_poison_memory_region(E.b->window + E.b->dyn_start + E.b->dyn_bytes, kDynEnd - E.b->dyn_start - E.b->dyn_bytes);
#endif
  }
#if CUDA_EMU_ASAN
  __asan_poison_memory_region(E.b->window + kStaticBegin, kStaticArea);
#endif
}

void end_block_smem() {
#if !CUDA_EMU_ASAN
  if (!E.b->dyn_bytes) return;
  auto check = [](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i)
      if (E.b->window[i] != kCanary) {
        std::fprintf(stderr,
                     "cuda_emu: a write outside the dynamic shared memory: byte offset %lld of a %zu-byte buffer "
                     "(the launch's smem argument)\n",
                     (long long)i - (long long)E.b->dyn_start, E.b->dyn_bytes);
        print_context(stderr);
        std::abort();
      }
  };
  check(E.b->protected_below, E.b->dyn_start);
  check(E.b->dyn_start + E.b->dyn_bytes, kDynEnd);
#endif
}

// Whether [addr, addr + bytes) lies in the block's dynamic or static shared memory.
bool in_shared(uint32_t addr, size_t bytes) {
  const size_t a = addr;
  return (a >= E.b->dyn_start && a + bytes <= E.b->dyn_start + E.b->dyn_bytes) ||
         (a >= kStaticBegin && a + bytes <= kStaticBegin + E.b->static_top);
}

unsigned char* shared_ptr(uint32_t addr, size_t bytes, const char* what, const Loc& loc) {
  const size_t a = addr;
  if (!in_shared(addr, bytes)) {
    if (a >= kDynBegin && a < kDynEnd + kPage)
      fatal(
          "%s at %s:%u: shared address 0x%x (%zu bytes) outside the %zu bytes of dynamic shared memory "
          "(byte offset %lld)",
          what, short_file(loc.file_name()), loc.line(), addr, bytes, E.b->dyn_bytes,
          (long long)a - (long long)E.b->dyn_start);
    fatal("%s at %s:%u: shared address 0x%x (%zu bytes) is not in the block's shared memory", what,
          short_file(loc.file_name()), loc.line(), addr, bytes);
  }
  return E.b->window + a;
}

// ---- warp collectives ----------------------------------------------------------------------------------
Warp& my_warp() { return E.b->warps[size_t(E.b->cur->index / 32)]; }

void check_in_kernel(const char* what) {
  if (!E.b->cur) fatal("%s called outside a kernel", what);
}

// Completes pending collective i of warp w (every non-exited lane of its mask has arrived): `compute` fills
// each arrived lane's `out` from the lanes' `in`; the waiting lanes become runnable.
void complete(Warp& w, int i, Fiber* lanes, int self) {
  Pending p = w.pending[i];
  w.pending[i] = w.pending[--w.npending];
  if (p.compute) p.compute(lanes, p.arrived);
  for (uint32_t m = p.arrived; m; m &= m - 1)
    if (std::countr_zero(m) != self) lanes[std::countr_zero(m)].state = kReady;
}

// A warp collective of the calling lane: returns once every non-exited lane of `mask` has called one of the same
// kind and mask (at the same place for the .aligned ldmatrix and mma, which need all 32 lanes).
void collective(uint32_t mask, int kind, const char* what, const Loc& loc, bool aligned, Compute compute) {
  Fiber* me = E.b->cur;
  const int lane = me->index % 32;
  Warp& w = my_warp();
  if (!(mask >> lane & 1u))
    fatal("%s at %s:%u with mask 0x%08x, which leaves out the calling lane %d", what, short_file(loc.file_name()),
          loc.line(), mask, lane);
  if (mask & ~w.exists)
    fatal("%s at %s:%u: mask 0x%08x names lanes that do not exist in this block (warp has lanes 0x%08x)", what,
          short_file(loc.file_name()), loc.line(), mask, w.exists);
  if (aligned && (mask & w.exited))
    fatal("%s at %s:%u: lanes 0x%08x have exited, but the instruction needs the whole warp", what,
          short_file(loc.file_name()), loc.line(), mask & w.exited);
  // PTX: a .sync collective waits until every non-exited lane of its mask has executed one "with the same
  // qualifiers and the same membermask" (any such instruction for shfl/vote/bar.warp; the same one for the
  // .aligned ldmatrix and mma). Lanes may wait in several collectives at once; a cycle ends in deadlock().
  int pi = -1;
  for (int i = 0; i < w.npending; ++i) {
    Pending& q = w.pending[i];
    if (q.kind != kind || q.mask != mask) continue;
    if (aligned && !same_loc(q.loc, loc))
      fatal(
          "lane %d in %s at %s:%u while lanes 0x%08x of its warp wait in %s at %s:%u: an .aligned instruction must "
          "be executed by all lanes at the same place",
          lane, what, short_file(loc.file_name()), loc.line(), q.arrived, q.what, short_file(q.loc.file_name()),
          q.loc.line());
    pi = i;
    break;
  }
  if (pi < 0) {
    if (w.npending == kMaxPending) fatal("more than %d concurrent warp collectives in one warp", kMaxPending);
    pi = w.npending++;
    w.pending[pi] = Pending{mask, 0, kind, aligned, what, loc, compute, uint8_t(w.next_sync++ % sizeof w.sync)};
  }
  Pending& p = w.pending[pi];
  char* sync = &w.sync[p.sync];
  tsan_release(sync);
  p.arrived |= 1u << lane;
  if (p.arrived == (mask & ~w.exited)) {
    tsan_acquire(sync);  // before the work for all (ldmatrix's reads): every lane's accesses before it are ordered
    complete(w, pi, &E.b->fibers[size_t(me->index - lane)], lane);
    tsan_release(sync);  // and the lanes it wakes after that work (a wgmma's reads, done at the wait for the warp)
    return;
  }
  me->state = kWarpWait;
  me->wait_loc = loc;
  me->wait_what = what;
  me->wait_mask = mask;
  wait_here();
  tsan_acquire(sync);
}

template <class T>
T& in_as(Fiber& f, size_t off = 0) {
  return *reinterpret_cast<T*>(f.in + off);
}
template <class T>
T& out_as(Fiber& f, size_t off = 0) {
  return *reinterpret_cast<T*>(f.out + off);
}

// ---- f16/bf16 for mma (independent of the code under test) ---------------------------------------------
float f16_to_f32(uint16_t h) {
#if defined(__F16C__)
  return _cvtsh_ss(h);  // the hardware conversion (exact, like the GPU's)
#endif
  const uint32_t sign = uint32_t(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0) {  // zero or subnormal: m * 2^-24, exact in f32
    const float v = float(m) * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  if (e == 31) return std::bit_cast<float>(sign | 0x7f800000u | (m << 13) | (m ? 0x400000u : 0u));
  return std::bit_cast<float>(sign | (e + 112u) << 23 | m << 13);
}
float bf16_to_f32(uint16_t h) { return std::bit_cast<float>(uint32_t(h) << 16); }
uint16_t f32_to_bf16_rn(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return uint16_t((x >> 16) | 0x40u);
  return uint16_t((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}
uint16_t f32_to_f16_rn(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint16_t sign = uint16_t((x >> 16) & 0x8000u);
  const float a = std::fabs(f);
  if (std::isnan(f)) return uint16_t(sign | 0x7e00u);
  if (a >= 65520.0f) return uint16_t(sign | 0x7c00u);  // rounds to Inf
  if (a < std::ldexp(1.0f, -14)) {                     // subnormal: multiples of 2^-24, nearest even
    const float q = std::nearbyint(a * 16777216.0f);   // default rounding mode: to nearest even
    return uint16_t(sign | uint16_t(q));
  }
  int e;
  std::frexp(a, &e);                           // a = f * 2^e, f in [0.5, 1)
  const float scaled = std::ldexp(a, 11 - e);  // [1024, 2048)
  uint32_t m = uint32_t(std::nearbyint(scaled));
  int be = e - 1 + 15;
  if (m == 2048) {
    m = 1024;
    ++be;
  }
  if (be >= 31) return uint16_t(sign | 0x7c00u);
  return uint16_t(sign | uint32_t(be) << 10 | (m & 0x3ffu));
}

}  // namespace

// ---- entry points ------------------------------------------------------------------------------------------
void fatal(const char* fmt, ...) {
  std::fflush(stdout);
  std::fprintf(stderr, "cuda_emu: ");
  va_list ap;
  va_start(ap, fmt);
  std::vfprintf(stderr, fmt, ap);
  va_end(ap);
  std::fprintf(stderr, "\n");
  print_context(stderr);
  std::fflush(stderr);
  std::abort();
}

long long clock_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void kernel_entry(const char* pretty_name, unsigned max_threads) {
  E.kernel_name = pretty_name;
  if (max_threads && unsigned(E.n) > max_threads)
    fatal(
        "launched with %d threads per block, more than its __launch_bounds__(%u): CUDA refuses such a launch "
        "(cudaErrorInvalidValue)",
        E.n, max_threads);
}

void syncthreads(const Loc& loc) {
  const TsanQuiet tsan_quiet;
  check_in_kernel("__syncthreads()");
  Fiber* me = E.b->cur;
  if (E.b->ndone > 0) {
    int first = 0;
    while (E.b->fibers[size_t(first)].state != kDone) ++first;
    fatal(
        "__syncthreads() at %s:%u after %d thread(s) of the block exited (thread %d first): every thread of the "
        "block must reach the barrier",
        short_file(loc.file_name()), loc.line(), E.b->ndone, first);
  }
  if (E.b->bar_arrived == 0) {
    E.b->bar_loc = loc;
    E.b->bar_first = me->index;
  } else if (!same_loc(loc, E.b->bar_loc)) {
    fatal("thread %d reached __syncthreads() at %s:%u while thread %d waits at __syncthreads() at %s:%u", me->index,
          short_file(loc.file_name()), loc.line(), E.b->bar_first, short_file(E.b->bar_loc.file_name()), E.b->bar_loc.line());
  }
  char* sync = &E.b->bar_sync[E.b->bar_gen % 4];
  tsan_release(sync);
  if (++E.b->bar_arrived == E.n) {
    E.b->bar_arrived = 0;
    ++E.b->bar_gen;
    for (Fiber& f : E.b->fibers)
      if (f.state == kBlockWait) f.state = kReady;
    tsan_acquire(sync);
    return;
  }
  me->state = kBlockWait;
  me->wait_loc = loc;
  me->wait_what = "__syncthreads()";
  wait_here();
  tsan_acquire(sync);
}

int syncthreads_reduce(int op, int pred, const Loc& loc) {
  const TsanQuiet tsan_quiet;
  check_in_kernel("__syncthreads_count/and/or()");
  if (E.b->bar_arrived == 0) {
    E.b->bar_op = op;
    E.b->bar_acc = op == 1 ? 1 : 0;
  } else if (E.b->bar_op != op) {
    fatal("__syncthreads_count/and/or at %s:%u mixed with another kind of barrier", short_file(loc.file_name()),
          loc.line());
  }
  if (op == 0) E.b->bar_acc += pred != 0;
  if (op == 1) E.b->bar_acc &= pred != 0;
  if (op == 2) E.b->bar_acc |= pred != 0;
  const bool last = E.b->bar_arrived + 1 == E.n;
  if (last) E.b->bar_result = E.b->bar_acc;
  syncthreads(loc);
  return E.b->bar_result;
}

void syncwarp(unsigned mask, const Loc& loc) {
  const TsanQuiet tsan_quiet;
  check_in_kernel("__syncwarp()");
  collective(mask, 1, "__syncwarp()", loc, false, nullptr);
}

// ---- blocks that wait for each other ---------------------------------------------------------------------
// With CUDA_EMU_RESIDENT=N > 1, N blocks are resident at once and take turns (launch_impl), so that a block can
// wait for another's progress (a flag it spins on with __nanosleep), as on a GPU, where blocks are dispatched in
// index order and run side by side.

void acquire_fences() {
  if (E.b->cur) tsan_acquire(&g_tsan_fence);
}

void fence_yield() {
  if (E.b->cur) {
    tsan_release(&g_tsan_fence);
    tsan_acquire(&g_tsan_fence);
  }
  if (E.resident < 2 || !E.b->cur) return;
  E.spin_rounds = 0;  // a fence publishes: progress
  block_yield();
}

void spin_yield(const Loc& loc) {
  Fiber* me = E.b->cur;
  if (!me) return;  // host code
  const TsanQuiet tsan_quiet;
  me->spinning = true;
  me->wait_loc = loc;
  // The block's runnable threads that have not spun in this round go first (the one being waited for may be
  // among them).
  if (Fiber* next = next_runnable(me->pos, true)) {
    me->state = kReady;
    switch_to(me, next);
    return;
  }
  // Every runnable thread of the block spins: the round is over, and only another block can end the wait.
  for (int i = 0; i < E.n; ++i) E.b->fibers[size_t(i)].spinning = false;
  constexpr uint64_t kMaxSpinRounds = 1000000;
  if (++E.spin_rounds > kMaxSpinRounds)
    fatal("spins at __nanosleep at %s:%u for good: in %llu rounds every thread that could run spun, in each of the %d "
          "resident block(s) (CUDA_EMU_RESIDENT; blocks are dispatched %s, so a block waiting for one that is not "
          "resident yet, or for itself, never ends)",
          short_file(loc.file_name()), loc.line(), (unsigned long long)kMaxSpinRounds, E.resident,
          E.dispatch_reverse ? "from the last index down (CUDA_EMU_DISPATCH=reverse)" : "in index order");
  if (E.resident > 1) block_yield();
}

uint64_t shfl(unsigned mask, uint64_t value, int mode, int b, int c, const Loc& loc) {
  const TsanQuiet tsan_quiet;
  check_in_kernel("__shfl_*_sync()");
  static const char* names[] = {"__shfl_sync()", "__shfl_up_sync()", "__shfl_down_sync()", "__shfl_xor_sync()"};
  Fiber& me = *E.b->cur;
  in_as<uint64_t>(me) = value;
  in_as<int32_t>(me, 8) = b;
  in_as<int32_t>(me, 12) = c;
  in_as<int32_t>(me, 16) = mode;
  collective(mask, 10 + mode, names[mode], loc, false, [](Fiber* lanes, uint32_t m) {
    // PTX ISA, shfl.sync: the source lane j and whether it is in range.
    for (uint32_t r = m; r; r &= r - 1) {
      const int lane = std::countr_zero(r);
      Fiber& f = lanes[lane];
      const int bval = in_as<int32_t>(f, 8) & 31, cval = in_as<int32_t>(f, 12) & 31;
      const int segmask = (in_as<int32_t>(f, 12) >> 8) & 31;
      const int max_lane = (lane & segmask) | (cval & ~segmask), min_lane = lane & segmask;
      int j = lane;
      bool ok = false;
      switch (in_as<int32_t>(f, 16)) {
        case 0:
          j = min_lane | (bval & ~segmask), ok = j <= max_lane;
          break;
        case 1:
          j = lane - bval, ok = j >= max_lane;
          break;
        case 2:
          j = lane + bval, ok = j <= max_lane;
          break;
        default:
          j = lane ^ bval, ok = j <= max_lane;
          break;
      }
      if (!ok) j = lane;
      // A source lane outside the mask gives an undefined value: all ones (NaN) rather than a plausible one.
      out_as<uint64_t>(f) = (m >> j & 1u) ? in_as<uint64_t>(lanes[j]) : ~uint64_t(0);
    }
  });
  return out_as<uint64_t>(me);
}

unsigned vote(unsigned mask, int op, int pred, const Loc& loc) {
  const TsanQuiet tsan_quiet;
  check_in_kernel("__ballot/__any/__all_sync()");
  static const char* names[] = {"__ballot_sync()", "__any_sync()", "__all_sync()"};
  Fiber& me = *E.b->cur;
  in_as<int32_t>(me) = pred != 0;
  in_as<int32_t>(me, 4) = op;
  collective(mask, 20 + op, names[op], loc, false, [](Fiber* lanes, uint32_t m) {
    uint32_t ballot = 0;
    for (uint32_t r = m; r; r &= r - 1) {
      const int lane = std::countr_zero(r);
      if (in_as<int32_t>(lanes[lane])) ballot |= 1u << lane;
    }
    const int op2 = in_as<int32_t>(lanes[std::countr_zero(m)], 4);
    const uint32_t result = op2 == 0 ? ballot : op2 == 1 ? uint32_t(ballot != 0) : uint32_t(ballot == m);
    for (uint32_t r = m; r; r &= r - 1) out_as<uint32_t>(lanes[std::countr_zero(r)]) = result;
  });
  return out_as<uint32_t>(me);
}

unsigned match_any(unsigned mask, uint64_t value, const Loc& loc) {
  const TsanQuiet tsan_quiet;
  check_in_kernel("__match_any_sync()");
  Fiber& me = *E.b->cur;
  in_as<uint64_t>(me) = value;
  collective(mask, 30, "__match_any_sync()", loc, false, [](Fiber* lanes, uint32_t m) {
    for (uint32_t r = m; r; r &= r - 1) {
      const int lane = std::countr_zero(r);
      uint32_t same = 0;
      for (uint32_t s = m; s; s &= s - 1) {
        const int o = std::countr_zero(s);
        if (in_as<uint64_t>(lanes[o]) == in_as<uint64_t>(lanes[lane])) same |= 1u << o;
      }
      out_as<uint32_t>(lanes[lane]) = same;
    }
  });
  return out_as<uint32_t>(me);
}

unsigned match_all(unsigned mask, uint64_t value, int* pred, const Loc& loc) {
  const TsanQuiet tsan_quiet;
  check_in_kernel("__match_all_sync()");
  Fiber& me = *E.b->cur;
  in_as<uint64_t>(me) = value;
  collective(mask, 31, "__match_all_sync()", loc, false, [](Fiber* lanes, uint32_t m) {
    bool all = true;
    const uint64_t v0 = in_as<uint64_t>(lanes[std::countr_zero(m)]);
    for (uint32_t s = m; s; s &= s - 1) all = all && in_as<uint64_t>(lanes[std::countr_zero(s)]) == v0;
    for (uint32_t r = m; r; r &= r - 1) out_as<uint32_t>(lanes[std::countr_zero(r)]) = all ? m : 0u;
  });
  *pred = out_as<uint32_t>(me) != 0;
  return out_as<uint32_t>(me);
}

unsigned reduce_sync(unsigned mask, int op, unsigned value, bool is_signed, const Loc& loc) {
  const TsanQuiet tsan_quiet;
  check_in_kernel("__reduce_*_sync()");
  Fiber& me = *E.b->cur;
  in_as<uint32_t>(me) = value;
  in_as<int32_t>(me, 4) = op;
  in_as<int32_t>(me, 8) = is_signed;
  collective(mask, 40 + op, "__reduce_*_sync()", loc, false, [](Fiber* lanes, uint32_t m) {
    Fiber& f0 = lanes[std::countr_zero(m)];
    const int op2 = in_as<int32_t>(f0, 4);
    const bool sgn = in_as<int32_t>(f0, 8) != 0;
    uint32_t acc = in_as<uint32_t>(f0);
    for (uint32_t s = m & (m - 1); s; s &= s - 1) {
      const uint32_t v = in_as<uint32_t>(lanes[std::countr_zero(s)]);
      switch (op2) {
        case 0:
          acc += v;
          break;
        case 1:
          acc = sgn ? uint32_t(std::min(int32_t(acc), int32_t(v))) : std::min(acc, v);
          break;
        case 2:
          acc = sgn ? uint32_t(std::max(int32_t(acc), int32_t(v))) : std::max(acc, v);
          break;
        case 3:
          acc &= v;
          break;
        case 4:
          acc |= v;
          break;
        default:
          acc ^= v;
          break;
      }
    }
    for (uint32_t r = m; r; r &= r - 1) out_as<uint32_t>(lanes[std::countr_zero(r)]) = acc;
  });
  return out_as<uint32_t>(me);
}

unsigned activemask() {
  const TsanQuiet tsan_quiet;
  check_in_kernel("__activemask()");
  const Warp& w = my_warp();
  return w.exists & ~w.exited;
}

unsigned lane_id() {
  const TsanQuiet tsan_quiet;
  check_in_kernel("%laneid");
  return unsigned(E.b->cur->index % 32);
}

void* dynamic_shared() {
  const TsanQuiet tsan_quiet;
  check_in_kernel("extern __shared__");
  return E.b->window + E.b->dyn_start;
}

void* static_shared(const void* key, size_t bytes, size_t align) {
  const TsanQuiet tsan_quiet;
  check_in_kernel("__shared__");
  for (const auto& [k, off] : E.b->statics)
    if (k == key) return E.b->window + off;
  // Exactly the declared alignment (an odd multiple of it below 16 bytes), so that a wider access than the
  // declaration allows is misaligned here as it may be on the GPU.
  size_t off = (E.b->static_top + kRedzone + align - 1) / align * align;
  if (align < 16 && (off / align) % 2 == 0) off += align;
  if (off + bytes > kStaticArea || off + bytes > kStaticSmemMax + 1024)
    fatal("static __shared__ memory of the block exceeds 48 KiB (%zu bytes requested)", off + bytes);
  if (off + bytes + E.b->dyn_bytes > kSmemPerBlockOptin + 1024)
    fatal("static (%zu) + dynamic (%zu) shared memory exceed the 227 KiB per block", off + bytes, E.b->dyn_bytes);
  E.b->static_top = off + bytes;
  E.b->statics.emplace_back(key, kStaticBegin + off);
  unsigned char* p = E.b->window + kStaticBegin + off;
#if CUDA_EMU_ASAN
  __asan_unpoison_memory_region(p, bytes);
#endif
  std::memset(p, 0xff, bytes);  // (the first thread to reach the declaration sets it up for all: not its store)
  return p;
}

bool is_shared(const void* p) {
  const auto* c = static_cast<const unsigned char*>(p);
  return E.b->window && c >= E.b->window && c < E.b->window + kWindow;
}

size_t shared_offset(const void* p, const Loc& loc) {
  if (!is_shared(p))
    fatal("__cvta_generic_to_shared at %s:%u of %p, which is not shared memory", short_file(loc.file_name()),
          loc.line(), p);
  return size_t(static_cast<const unsigned char*>(p) - E.b->window);
}

// ---- PTX ---------------------------------------------------------------------------------------------------
namespace ptx {

void cp_async(uint32_t dst_shared, uint64_t src_global, int cp_size, int src_size, const Loc& loc) {
  const TsanQuiet tsan_quiet;
  check_in_kernel("cp.async");
  if (cp_size != 4 && cp_size != 8 && cp_size != 16)
    fatal("cp.async at %s:%u: cp-size %d (must be 4, 8 or 16)", short_file(loc.file_name()), loc.line(), cp_size);
  if (src_size < 0 || src_size > cp_size)
    fatal("cp.async at %s:%u: src-size %d outside [0, %d]", short_file(loc.file_name()), loc.line(), src_size, cp_size);
  if (dst_shared % unsigned(cp_size) || src_global % unsigned(cp_size))
    fatal("cp.async at %s:%u: %d-byte copy from 0x%llx to shared 0x%x is not %d-byte aligned",
          short_file(loc.file_name()), loc.line(), cp_size, (unsigned long long)src_global, dst_shared, cp_size);
  unsigned char* dst = shared_ptr(dst_shared, size_t(cp_size), "cp.async", loc);
  const auto* src = reinterpret_cast<const unsigned char*>(uintptr_t(src_global));
  if (is_shared(src))
    fatal("cp.async at %s:%u: the source %p is shared memory", short_file(loc.file_name()), loc.line(), src);
  // Performed at the wait that covers it: reading the destination earlier shows the old contents.
  E.b->cur->copies.push_back({dst, src, uint32_t(cp_size), uint32_t(src_size)});
  if (E.stats) record_write(E.b->cp_by_warp, E.b->cur->cp_seq, dst_shared, cp_size);
}

void cp_async_commit_group(const Loc&) {
  const TsanQuiet tsan_quiet;
  check_in_kernel("cp.async.commit_group");
  Fiber& f = *E.b->cur;
  f.group_ends.push_back(f.copies.size());  // possibly an empty group, as PTX allows
}

namespace {
void perform(Fiber& f, size_t upto) {
  for (size_t i = 0; i < upto; ++i) {
    const Copy& c = f.copies[i];
    tsan_read(c.src, c.src_size);
    tsan_write(c.dst, c.cp_size);
    if (c.src_size) std::memcpy(c.dst, c.src, c.src_size);
    if (c.src_size < c.cp_size) std::memset(c.dst + c.src_size, 0, c.cp_size - c.src_size);
  }
  f.copies.erase(f.copies.begin(), f.copies.begin() + std::ptrdiff_t(upto));
}
}  // namespace

void cp_async_wait_group(int n, const Loc&) {
  const TsanQuiet tsan_quiet;
  check_in_kernel("cp.async.wait_group");
  Fiber& f = *E.b->cur;
  const int groups = int(f.group_ends.size());
  if (groups <= n) return;
  const size_t upto = f.group_ends[size_t(groups - n - 1)];
  perform(f, upto);
  f.group_ends.erase(f.group_ends.begin(), f.group_ends.begin() + (groups - n));
  for (size_t& e : f.group_ends) e -= upto;
}

void cp_async_wait_all(const Loc&) {
  const TsanQuiet tsan_quiet;
  check_in_kernel("cp.async.wait_all");
  Fiber& f = *E.b->cur;
  perform(f, f.copies.size());  // wait_all commits the open copies too
  f.group_ends.clear();
}

void ldmatrix(int count, bool trans, uint32_t addr, uint32_t* r, const Loc& loc) {
  const TsanQuiet tsan_quiet;
  check_in_kernel("ldmatrix");
  Fiber& me = *E.b->cur;
  in_as<uint32_t>(me) = addr;
  in_as<int32_t>(me, 4) = count;
  in_as<int32_t>(me, 8) = trans;
  static_assert(sizeof(Loc) <= 16);
  std::memcpy(me.in + 16, &loc, sizeof(Loc));
  collective(0xffffffffu, 50 + count * 2 + trans, trans ? "ldmatrix .trans" : "ldmatrix", loc, true,
             [](Fiber* lanes, uint32_t) {
               const int cnt = in_as<int32_t>(lanes[0], 4);
               const bool tr = in_as<int32_t>(lanes[0], 8) != 0;
               const uint16_t* rows[32] = {};
               for (int l = 0; l < 8 * cnt; ++l) {
                 const uint32_t a = in_as<uint32_t>(lanes[l]);
                 Loc where;
                 std::memcpy(&where, lanes[l].in + 16, sizeof(Loc));
                 if (a % 16)
                   fatal("ldmatrix at %s:%u: lane %d gives row address 0x%x, not 16-byte aligned",
                         short_file(where.file_name()), where.line(), l, a);
                 rows[l] = reinterpret_cast<const uint16_t*>(shared_ptr(a, 16, "ldmatrix", where));
                 tsan_read(rows[l], 16);
               }
               // Bank conflicts: each 8x8 matrix is one phase of 8 row reads of 16 bytes; a phase takes as many
               // wavefronts as the most distinct rows that fall on one 16-byte group of the 32 banks
               // (address / 16 % 8). Conflict-free: one wavefront per matrix.
               for (int m = 0; m < cnt; ++m) {
                 uint32_t seen[8];
                 int n = 0;
                 int per_group[8] = {};
                 for (int l = 8 * m; l < 8 * m + 8; ++l) {
                   const uint32_t a = in_as<uint32_t>(lanes[l]);
                   bool dup = false;
                   for (int i = 0; i < n; ++i) dup = dup || seen[i] == a;
                   if (dup) continue;
                   seen[n++] = a;
                   ++per_group[(a / 16) % 8];
                 }
                 E.ldm_wavefronts += uint64_t(*std::max_element(per_group, per_group + 8));
                 E.ldm_ideal += 1;
               }
               for (int l = 0; l < 32; ++l) {
                 auto* out = reinterpret_cast<uint32_t*>(lanes[l].out);
                 for (int m = 0; m < cnt; ++m) {
                   uint16_t lo, hi;
                   if (!tr) {  // lane l holds row l/4, columns 2(l%4) and 2(l%4)+1
                     lo = rows[8 * m + l / 4][2 * (l % 4)];
                     hi = rows[8 * m + l / 4][2 * (l % 4) + 1];
                   } else {  // the transpose: rows 2(l%4) and 2(l%4)+1 of column l/4
                     lo = rows[8 * m + 2 * (l % 4)][l / 4];
                     hi = rows[8 * m + 2 * (l % 4) + 1][l / 4];
                   }
                   out[m] = uint32_t(lo) | uint32_t(hi) << 16;
                 }
               }
             });
  std::memcpy(r, me.out, sizeof(uint32_t) * size_t(count));
}

void mma_m16n8k16_f32(int ab_type, float* d, const uint32_t* a, const uint32_t* b, const float* c, const Loc& loc) {
  const TsanQuiet tsan_quiet;
  check_in_kernel("mma.sync");
  Fiber& me = *E.b->cur;
  std::memcpy(me.in, a, 16);
  std::memcpy(me.in + 16, b, 8);
  std::memcpy(me.in + 24, c, 16);
  in_as<int32_t>(me, 40) = ab_type;
  collective(0xffffffffu, 60 + ab_type, ab_type ? "mma.sync m16n8k16 bf16" : "mma.sync m16n8k16 f16", loc, true,
             [](Fiber* lanes, uint32_t) {
               // PTX ISA fragment layouts for m16n8k16 with 16-bit A/B (g = lane / 4, q = lane % 4):
               //   A: a0,a1 (g, 2q..2q+1)  a2,a3 (g+8, 2q..)  a4,a5 (g, 2q+8..)  a6,a7 (g+8, 2q+8..)
               //   B: b0,b1 (2q..2q+1, g)  b2,b3 (2q+8.., g)
               //   C/D: c0,c1 (g, 2q..2q+1)  c2,c3 (g+8, 2q..2q+1)
               const bool bf = in_as<int32_t>(lanes[0], 40) != 0;
               uint16_t Ab[16][16], Bb[16][8];
               float A[16][16], B[16][8], D[16][8];
               for (int l = 0; l < 32; ++l) {
                 const int g = l / 4, q = l % 4;
                 const auto* ra = reinterpret_cast<const uint32_t*>(lanes[l].in);
                 const int arow[4] = {g, g + 8, g, g + 8}, acol[4] = {2 * q, 2 * q, 2 * q + 8, 2 * q + 8};
                 for (int i = 0; i < 4; ++i) {
                   Ab[arow[i]][acol[i]] = uint16_t(ra[i]);
                   Ab[arow[i]][acol[i] + 1] = uint16_t(ra[i] >> 16);
                 }
                 for (int i = 0; i < 2; ++i) {
                   Bb[2 * q + 8 * i][g] = uint16_t(ra[4 + i]);
                   Bb[2 * q + 8 * i + 1][g] = uint16_t(ra[4 + i] >> 16);
                 }
                 const float* cin = reinterpret_cast<const float*>(lanes[l].in + 24);
                 D[g][2 * q] = cin[0], D[g][2 * q + 1] = cin[1], D[g + 8][2 * q] = cin[2], D[g + 8][2 * q + 1] = cin[3];
               }
               if (bf) {
                 for (int i = 0; i < 256; ++i) (&A[0][0])[i] = bf16_to_f32((&Ab[0][0])[i]);
                 for (int i = 0; i < 128; ++i) (&B[0][0])[i] = bf16_to_f32((&Bb[0][0])[i]);
               } else {
                 for (int i = 0; i < 256; ++i) (&A[0][0])[i] = f16_to_f32((&Ab[0][0])[i]);
                 for (int i = 0; i < 128; ++i) (&B[0][0])[i] = f16_to_f32((&Bb[0][0])[i]);
               }
               // 16-bit products are exact in f32; each sum in f32, k in order (fma chains, vectorised over n).
#if defined(__AVX__) && defined(__FMA__)
               // A row's 8 sums in one register over k, four rows at a time (four independent chains). GCC keeps the
               // plain loop below scalar (8 fma chains a row): it was a fifth of an emulated bf16 ResNet-20 step.
               // Each lane of _mm256_fmadd_ps rounds once, as std::fma, and k runs in the same order: the same bits.
               for (int m = 0; m < 16; m += 4) {
                 __m256 d0 = _mm256_loadu_ps(D[m]), d1 = _mm256_loadu_ps(D[m + 1]), d2 = _mm256_loadu_ps(D[m + 2]),
                        d3 = _mm256_loadu_ps(D[m + 3]);
                 for (int k = 0; k < 16; ++k) {
                   const __m256 bk = _mm256_loadu_ps(B[k]);
                   d0 = _mm256_fmadd_ps(_mm256_set1_ps(A[m][k]), bk, d0);
                   d1 = _mm256_fmadd_ps(_mm256_set1_ps(A[m + 1][k]), bk, d1);
                   d2 = _mm256_fmadd_ps(_mm256_set1_ps(A[m + 2][k]), bk, d2);
                   d3 = _mm256_fmadd_ps(_mm256_set1_ps(A[m + 3][k]), bk, d3);
                 }
                 _mm256_storeu_ps(D[m], d0);
                 _mm256_storeu_ps(D[m + 1], d1);
                 _mm256_storeu_ps(D[m + 2], d2);
                 _mm256_storeu_ps(D[m + 3], d3);
               }
#else
               for (int m = 0; m < 16; ++m)  // a row's 8 sums held over k
                 for (int k = 0; k < 16; ++k)
                   for (int n = 0; n < 8; ++n) D[m][n] = std::fma(A[m][k], B[k][n], D[m][n]);
#endif
               for (int l = 0; l < 32; ++l) {
                 const int g = l / 4, q = l % 4;
                 auto* dout = reinterpret_cast<float*>(lanes[l].out);
                 dout[0] = D[g][2 * q], dout[1] = D[g][2 * q + 1], dout[2] = D[g + 8][2 * q],
                 dout[3] = D[g + 8][2 * q + 1];
               }
             });
  std::memcpy(d, me.out, 16);
}

uint32_t cvt_rn_f16x2_f32(float hi, float lo) {
  return uint32_t(f32_to_f16_rn(lo)) | uint32_t(f32_to_f16_rn(hi)) << 16;
}
uint32_t cvt_rn_bf16x2_f32(float hi, float lo) {
  return uint32_t(f32_to_bf16_rn(lo)) | uint32_t(f32_to_bf16_rn(hi)) << 16;
}
uint16_t cvt_rn_f16_f32(float f) { return f32_to_f16_rn(f); }
uint16_t cvt_rn_bf16_f32(float f) { return f32_to_bf16_rn(f); }
float cvt_f32_f16(uint16_t h) { return f16_to_f32(h); }
float cvt_f32_bf16(uint16_t h) { return bf16_to_f32(h); }

void st_shared_v2_f32(uint32_t addr, float x, float y, const Loc& loc) {
  const TsanQuiet tsan_quiet;
  check_in_kernel("st.shared.v2.f32");
  if (addr % 8)
    fatal("st.shared.v2.f32 at %s:%u: shared address 0x%x is not 8-byte aligned", short_file(loc.file_name()),
          loc.line(), addr);
  const float v[2] = {x, y};
  tsan_write(shared_ptr(addr, 8, "st.shared.v2.f32", loc), 8);
  std::memcpy(shared_ptr(addr, 8, "st.shared.v2.f32", loc), v, 8);
  if (E.stats) record_write(E.b->st_by_warp, E.b->cur->st_seq, addr, 8);
}

void st_shared_b32(uint32_t addr, uint32_t v, const Loc& loc) {
  const TsanQuiet tsan_quiet;
  check_in_kernel("st.shared.b32");
  if (addr % 4)
    fatal("st.shared.b32 at %s:%u: shared address 0x%x is not 4-byte aligned", short_file(loc.file_name()), loc.line(),
          addr);
  tsan_write(shared_ptr(addr, 4, "st.shared.b32", loc), 4);
  std::memcpy(shared_ptr(addr, 4, "st.shared.b32", loc), &v, 4);
  if (E.stats) record_write(E.b->st_by_warp, E.b->cur->st_seq, addr, 4);
}

// ---- sm_90a: mbarrier, TMA, wgmma ------------------------------------------------------------------------
namespace {
Mbarrier& mbarrier_at(uint32_t bar, const char* what, const Loc& loc) {
  if (bar % 8) fatal("%s at %s:%u: mbarrier address 0x%x is not 8-byte aligned", what, short_file(loc.file_name()), loc.line(), bar);
  shared_ptr(bar, 8, what, loc);
  auto it = E.b->mbarriers.find(bar);
  if (it == E.b->mbarriers.end())
    fatal("%s at %s:%u: shared address 0x%x holds no initialised mbarrier (mbarrier.init first)", what,
          short_file(loc.file_name()), loc.line(), bar);
  return it->second;
}

void mbarrier_maybe_complete(Mbarrier& m) {
  if (m.pending == 0 && m.tx == 0) {
    m.phase ^= 1u;
    m.pending = m.expected;
    ++m.completed;
  }
}

// Swizzled byte offset inside a tile (PTX ISA, "Tensor-map swizzle modes" / wgmma "matrix descriptor"):
// 16-byte chunk bits [4, 4 + log2(span / 16)) XOR the bits [7, ...) of the 128-byte row index, which is how
// both TMA and wgmma apply it to shared addresses (tiles 1024-byte aligned for the 128-byte mode).
uint32_t swizzle_offset(uint32_t off, int mode) {
  switch (mode) {
    case CU_TENSOR_MAP_SWIZZLE_128B:
      return off ^ (((off >> 7) & 7u) << 4);
    case CU_TENSOR_MAP_SWIZZLE_64B:
      return off ^ (((off >> 7) & 3u) << 4);
    case CU_TENSOR_MAP_SWIZZLE_32B:
      return off ^ (((off >> 7) & 1u) << 4);
    default:
      return off;
  }
}

// Elements a box of `m` loads along dimension i: ceil(boxDim / elementStride).
uint32_t box_count(const TensorMap& m, uint32_t i) { return (uint32_t(m.box[i]) + m.step[i] - 1) / m.step[i]; }
// The bytes of one box of `m`: its rows (box[0] elements) one after another, dimension 1 fastest.
// An im2col map's box: pixelsPerColumn rows of channelsPerPixel.
uint32_t box_bytes(const TensorMap& m) {
  if (m.im2col) return uint32_t(m.pixels) * m.box[0] * m.elem_bytes;
  uint32_t bytes = m.elem_bytes;
  for (uint32_t i = 0; i < m.rank; ++i) bytes *= box_count(m, i);
  return bytes;
}

// Walks a box of `m` at coordinates c: visit(byte offset in the box's shared-memory image, swizzled; the element's
// global address, or null outside the tensor) for each element. Row r of the box is its index in dimensions 1..
// (dimension 1 fastest), every step-th element from the box's coordinate.
// A store (whole_granules) writes the innermost dimension in whole 16-byte granules, as the GPU does: where a row's
// bytes are not a multiple of 16, the elements after its last, up to the next 16-byte boundary, count as inside
// and are overwritten (seen on an H200 on 2026-11-27: a C with padded rows lost its padding; triton-lang/triton
// issue 11583). Loads clip at the last element.
template <class Visit>
void walk_box(const TensorMap& m, const int32_t* c, Visit visit, bool whole_granules = false) {
  const uint32_t row_bytes = m.box[0] * m.elem_bytes, rows = box_bytes(m) / row_bytes;
  const uint64_t dim0 = whole_granules ? (m.dim[0] * m.elem_bytes + 15) / 16 * 16 / m.elem_bytes : m.dim[0];
  for (uint32_t r = 0; r < rows; ++r) {
    bool inside = true;
    uint64_t offset = 0;
    for (uint32_t i = 1, rest = r; i < m.rank; rest /= box_count(m, i), ++i) {
      const int64_t coord = int64_t(c[i]) + int64_t(rest % box_count(m, i)) * m.step[i];
      inside = inside && coord >= 0 && uint64_t(coord) < m.dim[i];
      offset += uint64_t(coord) * m.stride[i - 1];
    }
    for (uint32_t e = 0; e < m.box[0]; ++e) {
      const int64_t x = int64_t(c[0]) + e;
      const bool in = inside && x >= 0 && uint64_t(x) < dim0;
      visit(swizzle_offset(r * row_bytes + e * m.elem_bytes, m.swizzle),
            in ? const_cast<unsigned char*>(m.base) + offset + uint64_t(x) * m.elem_bytes : nullptr);
    }
  }
}

// Walks an im2col load of `m` at coordinates c with offsets `off` (PTX ISA, "Tensor copy: im2col mode"): row p of
// the box is the p-th pixel of a traversal that starts at (c[1], .., c[rank - 2]) in image c[rank - 1] and steps
// each spatial dimension i by its traversal stride within the bounding box [lower[i - 1], dim[i] - 1 +
// upper[i - 1]] (dimension 1 fastest; past the box's end a dimension restarts at its lower corner and the next one
// steps; past the last spatial dimension the next image begins). The pixel loaded is the traversal's position plus
// the offsets, channels c[0].. of it: zeros outside the tensor. visit as walk_box's. The rule as
// triton-lang/triton's python/tutorials/gluon/13-conv-im2col.py states it; the five loads whose results that tutorial
// lists (and its tests assert on Hopper: padding, offsets, wrapping into the next image) the emulator's self-test
// repeats (CudaEmu.TmaIm2colLoadsAsDocumented).
template <class Visit>
void walk_im2col(const TensorMap& m, const int32_t* c, const uint16_t* off, Visit visit) {
  const uint32_t spatial = m.rank - 2, row_bytes = m.box[0] * m.elem_bytes;
  int64_t pos[kTensorMapMaxRank];
  for (uint32_t i = 1; i < m.rank; ++i) pos[i] = c[i];
  for (uint32_t p = 0; p < m.pixels; ++p) {
    bool inside = pos[m.rank - 1] >= 0 && uint64_t(pos[m.rank - 1]) < m.dim[m.rank - 1];
    uint64_t offset = inside ? uint64_t(pos[m.rank - 1]) * m.stride[m.rank - 2] : 0;
    for (uint32_t i = 1; i <= spatial; ++i) {
      const int64_t coord = pos[i] + off[i - 1];
      inside = inside && coord >= 0 && uint64_t(coord) < m.dim[i];
      if (inside) offset += uint64_t(coord) * m.stride[i - 1];
    }
    for (uint32_t e = 0; e < m.box[0]; ++e) {
      const int64_t x = int64_t(c[0]) + e;
      const bool in = inside && x >= 0 && uint64_t(x) < m.dim[0];
      visit(swizzle_offset(p * row_bytes + e * m.elem_bytes, m.swizzle),
            in ? const_cast<unsigned char*>(m.base) + offset + uint64_t(x) * m.elem_bytes : nullptr);
    }
    uint32_t i = 1;
    for (; i <= spatial; ++i) {  // the next pixel: step dimension i, or restart it and carry
      pos[i] += m.step[i];
      if (pos[i] <= int64_t(m.dim[i]) - 1 + m.upper[i - 1]) break;
      pos[i] = m.lower[i - 1];
    }
    if (i > spatial) ++pos[m.rank - 1];
  }
}

void perform_tma(const TmaLoad& t) {
  const TensorMap& m = t.map;
  const uint32_t bytes = box_bytes(m);
  unsigned char* dst = shared_ptr(t.dst, bytes, "cp.async.bulk.tensor", t.loc);
  for (uint32_t line = t.dst / 128; line < (t.dst + bytes + 127) / 128; ++line) E.b->fills[line] = FillTag{t.bar, t.phase};
  tsan_acquire(&g_tsan_tokens[t.token]);  // what the issuing thread had done when it issued the load
  const auto copy = [&](uint32_t at, const unsigned char* global) {
    tsan_write(dst + at, m.elem_bytes);
    if (global) {
      tsan_read(global, m.elem_bytes);
      std::memcpy(dst + at, global, m.elem_bytes);
    } else {
      std::memset(dst + at, m.oob_nan ? 0xff : 0, m.elem_bytes);
    }
  };
  if (m.im2col)
    walk_im2col(m, t.c, t.off, copy);
  else
    walk_box(m, t.c, copy);
  Mbarrier& b = mbarrier_at(t.bar, "cp.async.bulk.tensor (complete_tx)", t.loc);
  tsan_release(&b.sync[b.completed % 4]);
  b.tx -= int64_t(bytes);
  mbarrier_maybe_complete(b);
}

// The tensor map at `tensor_map` for a cp.async.bulk.tensor.<rank>d (`what`) with its box at shared address smem:
// made by cuTensorMapEncodeIm2col for an im2col load (im2col), else by cuTensorMapEncodeTiled, of that rank, smem
// aligned for its swizzle, a mode the emulator takes.
TensorMap checked_map(uint64_t tensor_map, int rank, uint32_t smem, const char* what, const Loc& loc,
                      bool im2col = false) {
  TensorMap m;
  std::memcpy(&m, reinterpret_cast<const void*>(uintptr_t(tensor_map)), sizeof m);
  if (m.magic != kTensorMapMagic || bool(m.im2col) != im2col)
    fatal("%s at %s:%u: %p is not a tensor map made by %s", what, short_file(loc.file_name()), loc.line(),
          reinterpret_cast<const void*>(uintptr_t(tensor_map)),
          im2col ? "cuTensorMapEncodeIm2col" : "cuTensorMapEncodeTiled");
  if (uint32_t(rank) != m.rank)
    fatal("%s (%dd) at %s:%u: the tensor map has rank %u", what, rank, short_file(loc.file_name()), loc.line(), m.rank);
  // The GPU swizzles by the shared address's bits (128 bytes: bits [4, 7) XOR [7, 10); 64: [4, 6) XOR [7, 9); 32: bit 4
  // XOR bit 7), so a box's image starts where the pattern does: 1024, 512 or 256 bytes; the emulator swizzles from the
  // box's start, which is the same there. Unswizzled: 128 bytes.
  const uint32_t align = m.swizzle == CU_TENSOR_MAP_SWIZZLE_128B  ? 1024
                         : m.swizzle == CU_TENSOR_MAP_SWIZZLE_64B ? 512
                         : m.swizzle == CU_TENSOR_MAP_SWIZZLE_32B ? 256
                                                                  : 128;
  if (smem % align)
    fatal("%s at %s:%u: shared address 0x%x is not %u-byte aligned (the map's swizzle starts there)", what,
          short_file(loc.file_name()), loc.line(), smem, align);
  if (m.swizzle == CU_TENSOR_MAP_SWIZZLE_128B && m.box[0] * m.elem_bytes != 128)
    fatal("%s at %s:%u: the emulator takes 128-byte-swizzled boxes of 128-byte rows only", what,
          short_file(loc.file_name()), loc.line());
  shared_ptr(smem, box_bytes(m), what, loc);
  return m;
}

// Lets another runnable thread of the block go first (a thread polling an mbarrier); false when none can.
bool yield_to_others() {
  Fiber* me = E.b->cur;
  // CUDA_EMU_SCHEDULE=warp: a lane of its own warp first, unless those only poll too (then the rotation,
  // which reaches the thread that can complete the phase)
  Fiber* next = E.warp_greedy ? next_in_warp(me, true) : nullptr;
  if (!next) next = next_runnable(me->pos);
  if (!next || next == me) return false;
  me->state = kReady;
  switch_to(me, next);
  return true;
}

// The 16-bit elements of one wgmma operand held in shared memory as its descriptor describes it, with the
// 128-byte swizzle (the only mode emulated): element (row, k) is row `row` (m of A, n of B), column k. PTX ISA,
// "Shared Memory Matrix Layout", canonical layouts in units of 8 16-bit values (T = 8):
//   k-major:  ((8,m),(T,2k)):((8T,SBO),(1,T)): a row's k values in one 128-byte row, rows 128 bytes apart,
//             8-row groups SBO apart;
//   MN-major: ((T,8,m),(8,k)):((1,T,LBO),(8T,SBO)): 64 m (or n) values in one 128-byte row per k, k rows
//             128 bytes apart, 8-row groups of k SBO apart, 64-wide blocks of m (n) LBO apart.
// The swizzle moves 16-byte chunks inside their 128-byte line, so the elements of a line share the checks: TMA's
// fill of the line against the phases the reading warp has seen, and the bounds. They run when a read enters a line
// (the emulator's hot spot was running them for every element); read k-major operands row by row and MN-major
// ones k by k to stay on a line.
class WgmmaOperand {
 public:
  WgmmaOperand(uint64_t desc, bool mn_major, const Fiber& reader, const Loc& loc)
      : start_(uint32_t(desc & 0x3fffu) << 4),
        lbo_(uint32_t((desc >> 16) & 0x3fffu) << 4),
        sbo_(uint32_t((desc >> 32) & 0x3fffu) << 4),
        mn_major_(mn_major),
        reader_(reader),
        loc_(loc) {}

  bool mn_major() const { return mn_major_; }

  // The 8 elements from (row, k) on along the layout's contiguous dimension (k k-major, row MN-major; that
  // coordinate a multiple of 8): one 16-byte chunk, which the swizzle moves whole.
  const unsigned char* chunk(int row, int k) {
    const uint32_t addr = mn_major_ ? start_ + uint32_t(row / 64) * lbo_ + uint32_t(k / 8) * sbo_ +
                                          uint32_t(k % 8) * 128u + uint32_t(row % 64) * 2u
                                    : start_ + uint32_t(row / 8) * sbo_ + uint32_t(row % 8) * 128u + uint32_t(k) * 2u;
    const uint32_t phys = (addr & ~0x3ffu) | swizzle_offset(addr & 0x3ffu, CU_TENSOR_MAP_SWIZZLE_128B);
    if (phys / 128 != line_) enter_line(phys);
    // a line partly outside shared memory: the chunk's own bounds (the message names it)
    const unsigned char* p = line_base_ ? line_base_ + phys % 128 : shared_ptr(phys, 16, "wgmma operand", loc_);
    tsan_read(p, 16);
    return p;
  }

 private:
  void enter_line(uint32_t phys) {
    line_ = phys / 128;
    const auto fill = E.b->fills.find(line_);
    if (fill != E.b->fills.end()) {
      const auto seen = reader_.seen_phases.find(fill->second.bar);
      const uint64_t seen_phase = seen == reader_.seen_phases.end() ? 0 : seen->second;
      if (fill->second.phase > seen_phase)
        fatal(
            "wgmma at %s:%u (warp %d) reads shared memory at 0x%x that TMA filled for phase %llu of the mbarrier at "
            "0x%x, while this warp has seen %llu phases of it complete: the stage was refilled before every reader "
            "was done with it (a missing barrier or release before the refill)",
            short_file(loc_.file_name()), loc_.line(), reader_.index / 32, phys, (unsigned long long)fill->second.phase,
            fill->second.bar, (unsigned long long)seen_phase);
    }
    line_base_ = in_shared(line_ * 128, 128) ? E.b->window + size_t(line_) * 128 : nullptr;
  }

  const uint32_t start_, lbo_, sbo_;
  const bool mn_major_;
  const Fiber& reader_;
  const Loc& loc_;
  uint32_t line_ = ~0u;
  const unsigned char* line_base_ = nullptr;
};

void check_wgmma_desc(uint64_t desc, bool mn_major, const char* which, const Loc& loc) {
  const int mode = int(desc >> 62);
  const int base_offset = int((desc >> 49) & 7u);
  const uint32_t start = uint32_t(desc & 0x3fffu) << 4;
  if (mode != 1)
    fatal("wgmma at %s:%u: %s descriptor has swizzle mode %d; the emulator supports the 128-byte swizzle (1) only",
          short_file(loc.file_name()), loc.line(), which, mode);
  if (base_offset != 0 || (start & (mn_major ? 0x3ffu : 0x380u)) != 0)
    fatal("wgmma at %s:%u: %s descriptor starts at 0x%x with base offset %d: a 128-byte-swizzled tile must start on "
          "its 1024-byte pattern (k steps move the start by < 128 bytes k-major, by whole 8-row groups MN-major)",
          short_file(loc.file_name()), loc.line(), which, start, base_offset);
  const uint32_t lbo = uint32_t((desc >> 16) & 0x3fffu) << 4;
  if (mn_major && (lbo == 0 || lbo % 1024))
    fatal("wgmma at %s:%u: MN-major %s descriptor has leading byte offset %u; the emulated layout puts its 64-wide "
          "blocks whole 1024-byte patterns apart",
          short_file(loc.file_name()), loc.line(), which, lbo);
  if (((desc >> 32) & 0x3fffu) << 4 != 1024)
    fatal("wgmma at %s:%u: %s descriptor stride byte offset %u; 8 rows of 128 bytes (1024) is the emulated layout",
          short_file(loc.file_name()), loc.line(), which, unsigned(((desc >> 32) & 0x3fffu) << 4));
}

// Performs the first `count` wgmmas of every lane of a warp (all lanes issued the same ones).
void perform_wgmmas(Fiber* lanes, uint32_t mask, size_t count) {
  const int wg_warp = (lanes[0].index / 32) % 4;  // this warp's 16 rows of the warpgroup's 64
  for (size_t i = 0; i < count; ++i) {
    const Wgmma& op = lanes[0].wgmmas[i];
    for (uint32_t m = mask; m; m &= m - 1) {
      const Wgmma& o = lanes[std::countr_zero(m)].wgmmas[i];
      if (o.n != op.n || o.ab_type != op.ab_type || o.desc_a != op.desc_a || o.desc_b != op.desc_b ||
          o.scale_d != op.scale_d || o.mn_a != op.mn_a || o.mn_b != op.mn_b)
        fatal("wgmma at %s:%u: the lanes of warp %d gave different operands to the same wgmma", short_file(op.loc.file_name()),
              op.loc.line(), lanes[0].index / 32);
    }
    auto to_f32 = [&](uint16_t h) { return op.ab_type ? bf16_to_f32(h) : f16_to_f32(h); };
    // The warp's 16 x n block of D at once, vectorised over n: each element still takes its 16 products in k
    // order, one fma each (the bits of a lane-by-lane loop).
    const size_t n = size_t(op.n);
    float A[16][16];
    thread_local std::vector<float> Bt, D;  // [k][n], [row][n]
    Bt.resize(16 * n);
    D.assign(16 * n, 0.0f);
    WgmmaOperand a(op.desc_a, op.mn_a, lanes[0], op.loc), b(op.desc_b, op.mn_b, lanes[0], op.loc);
    // in the layout's order, a 16-byte chunk at a time: row by row k-major, k by k MN-major
    const auto gather = [&](WgmmaOperand& src, int row0, int rows, auto&& set) {
      uint16_t v[8];
      if (!src.mn_major()) {
        for (int r = 0; r < rows; ++r)
          for (int k0 = 0; k0 < 16; k0 += 8) {
            std::memcpy(v, src.chunk(row0 + r, k0), 16);
            for (int e = 0; e < 8; ++e) set(r, k0 + e, v[e]);
          }
      } else {
        for (int k = 0; k < 16; ++k)
          for (int r0 = 0; r0 < rows; r0 += 8) {
            std::memcpy(v, src.chunk(row0 + r0, k), 16);
            for (int e = 0; e < 8; ++e) set(r0 + e, k, v[e]);
          }
      }
    };
    gather(a, wg_warp * 16, 16, [&](int r, int k, uint16_t h) { A[r][k] = to_f32(h); });
    gather(b, 0, op.n, [&](int c, int k, uint16_t h) { Bt[size_t(k) * n + size_t(c)] = to_f32(h); });
    // D fragment (PTX ISA, wgmma .m64nNk16 f32 accumulators): lane l holds rows l / 4 and l / 4 + 8 of the
    // warp's 16; d[4 j + 2 h + e] is column 8 j + 2 (l % 4) + e of row l / 4 + 8 h.
    const auto fragment = [&](auto&& visit) {
      for (uint32_t m = mask; m; m &= m - 1) {
        const int l = std::countr_zero(m);
        const Wgmma& o = lanes[l].wgmmas[i];
        for (int j = 0; j < op.n / 8; ++j)
          for (int h = 0; h < 2; ++h)
            for (int e = 0; e < 2; ++e)
              visit(*o.d[size_t(4 * j + 2 * h + e)], D[size_t(l / 4 + 8 * h) * n + size_t(8 * j + 2 * (l % 4) + e)]);
      }
    };
    if (op.scale_d) fragment([](const float& reg, float& acc) { acc = reg; });
    // W columns' sums held in registers over k (64: 8 independent vector chains)
    const auto accumulate = [&]<size_t W>(std::integral_constant<size_t, W>) {
      for (int r = 0; r < 16; ++r)
        for (size_t c0 = 0; c0 < n; c0 += W) {
          float acc[W];
          std::memcpy(acc, &D[size_t(r) * n + c0], sizeof acc);
          for (int k = 0; k < 16; ++k) {
            const float x = A[r][k];
            const float* bk = &Bt[size_t(k) * n + c0];
            for (size_t c = 0; c < W; ++c) acc[c] = std::fma(x, bk[c], acc[c]);
          }
          std::memcpy(&D[size_t(r) * n + c0], acc, sizeof acc);
        }
    };
    if (n % 64 == 0)
      accumulate(std::integral_constant<size_t, 64>{});
    else
      accumulate(std::integral_constant<size_t, 8>{});  // n is a multiple of 8
    fragment([](float& reg, const float& acc) { reg = acc; });
  }
  for (uint32_t m = mask; m; m &= m - 1) {
    Fiber& f = lanes[std::countr_zero(m)];
    f.wgmmas.erase(f.wgmmas.begin(), f.wgmmas.begin() + std::ptrdiff_t(count));
    for (size_t& e : f.wgmma_group_ends) e -= count;
  }
}
}  // namespace

void mbarrier_init(uint32_t bar, uint32_t count, const Loc& loc) {
  const TsanQuiet tsan_quiet;
  check_in_kernel("mbarrier.init");
  if (bar % 8) fatal("mbarrier.init at %s:%u: address 0x%x is not 8-byte aligned", short_file(loc.file_name()), loc.line(), bar);
  shared_ptr(bar, 8, "mbarrier.init", loc);
  if (count == 0 || count >= (1u << 20))
    fatal("mbarrier.init at %s:%u: count %u outside [1, 2^20)", short_file(loc.file_name()), loc.line(), count);
  Mbarrier m;
  m.expected = m.pending = count;
  E.b->mbarriers[bar] = m;
}

void mbarrier_arrive_expect_tx(uint32_t bar, uint32_t tx_bytes, const Loc& loc) {
  const TsanQuiet tsan_quiet;
  check_in_kernel("mbarrier.arrive.expect_tx");
  Mbarrier& m = mbarrier_at(bar, "mbarrier.arrive.expect_tx", loc);
  tsan_release(&m.sync[m.completed % 4]);
  m.tx += int64_t(tx_bytes);
  if (m.pending == 0)
    fatal("mbarrier.arrive.expect_tx at %s:%u: more arrivals than the barrier's count %u in one phase",
          short_file(loc.file_name()), loc.line(), m.expected);
  --m.pending;
  mbarrier_maybe_complete(m);
}

bool mbarrier_try_wait_parity(uint32_t bar, uint32_t parity, const Loc& loc) {
  const TsanQuiet tsan_quiet;
  check_in_kernel("mbarrier.try_wait.parity");
  mbarrier_at(bar, "mbarrier.try_wait.parity", loc);
  // the TMA loads completing on this barrier land now, at the latest moment a waiting thread allows
  for (size_t i = 0; i < E.b->tma_pending.size();) {
    if (E.b->tma_pending[i].bar == bar) {
      const TmaLoad t = E.b->tma_pending[i];
      E.b->tma_pending.erase(E.b->tma_pending.begin() + std::ptrdiff_t(i));
      perform_tma(t);
    } else {
      ++i;
    }
  }
  // the phase of parity `parity` has completed when the current phase has the other parity
  if (E.b->mbarriers[bar].phase != (parity & 1u)) {
    // A thread that passes a second time with no phase completed since its last pass waited for a phase two or
    // more ahead of the last one completed, which the parity cannot tell from the older one: it goes on as if
    // its phase had completed (the stage it guards still holds the data of two uses before).
    const uint64_t completed = E.b->mbarriers[bar].completed;
    const auto seen = E.b->cur->seen_phases.find(bar);
    if (seen != E.b->cur->seen_phases.end() && seen->second == completed)
      fatal("mbarrier.try_wait.parity at %s:%u: passes phase parity %u of the mbarrier at 0x%x again, with no phase "
            "completed since this thread last passed (%llu completed): a wait for a phase two or more ahead of the "
            "last one completed, which its parity cannot tell from an old one",
            short_file(loc.file_name()), loc.line(), parity, bar, (unsigned long long)completed);
    E.b->cur->seen_phases[bar] = completed;
    E.b->cur->failed_waits = 0;
    tsan_acquire(&E.b->mbarriers[bar].sync[(completed - 1) % 4]);  // the last phase completed has this parity
    return true;
  }
  // Not yet: others run first. When no other thread of the block can run, nothing can complete the phase;
  // when the others only poll too (each try lets every runnable thread run until it blocks or polls), they
  // never will.
  constexpr uint64_t kMaxFailedWaits = 100000;
  if (++E.b->cur->failed_waits > kMaxFailedWaits || !yield_to_others())
    fatal("mbarrier.try_wait.parity at %s:%u: waits for phase parity %u of the mbarrier at 0x%x, which no thread "
          "of the block can complete any more (arrivals pending %u, transaction bytes pending %lld)",
          short_file(loc.file_name()), loc.line(), parity, bar, E.b->mbarriers[bar].pending,
          (long long)E.b->mbarriers[bar].tx);
  return false;
}

void fence_mbarrier_init(const Loc&) {
  const TsanQuiet tsan_quiet;
  check_in_kernel("fence.mbarrier_init");
}

void trap(const Loc& loc) {
  const TsanQuiet tsan_quiet;
  check_in_kernel("trap");
  fatal("trap at %s:%u: the kernel stopped itself (on a GPU the launch fails with cudaErrorLaunchFailure)",
        short_file(loc.file_name()), loc.line());
}

namespace {
void issue_tma_load(TmaLoad& t, uint32_t dst, int rank, const int32_t* coords, uint32_t bar, const Loc& loc) {
  t.phase = mbarrier_at(bar, "cp.async.bulk.tensor", loc).completed + 1;
  t.token = g_tsan_next_token++ % sizeof g_tsan_tokens;
  tsan_release(&g_tsan_tokens[t.token]);
  t.dst = dst, t.bar = bar, t.loc = loc;
  for (int i = 0; i < kTensorMapMaxRank; ++i) t.c[i] = i < rank ? coords[i] : 0;
  // CUDA_EMU_TMA=early performs the load now, the earliest completion CUDA allows: a refill issued before
  // every reader of the stage is done then overwrites what their pending wgmmas still read. The default
  // (late) performs it when a thread first waits on its mbarrier: reading before the wait sees old data.
  const char* mode = std::getenv("CUDA_EMU_TMA");
  if (mode && std::strcmp(mode, "early") == 0)
    perform_tma(t);
  else
    E.b->tma_pending.push_back(t);
}
}  // namespace

void tma_load(uint32_t dst, uint64_t tensor_map, int rank, const int32_t* coords, uint32_t bar, const Loc& loc) {
  const TsanQuiet tsan_quiet;
  check_in_kernel("cp.async.bulk.tensor");
  TmaLoad t{};
  t.map = checked_map(tensor_map, rank, dst, "cp.async.bulk.tensor", loc);
  issue_tma_load(t, dst, rank, coords, bar, loc);
}

void tma_load_im2col(uint32_t dst, uint64_t tensor_map, int rank, const int32_t* coords, const uint16_t* offsets,
                     uint32_t bar, const Loc& loc) {
  const TsanQuiet tsan_quiet;
  check_in_kernel("cp.async.bulk.tensor (im2col)");
  g_tma_im2col_loads.fetch_add(1);
  TmaLoad t{};
  t.map = checked_map(tensor_map, rank, dst, "cp.async.bulk.tensor (im2col)", loc, /*im2col=*/true);
  for (int i = 0; i + 2 < rank; ++i) t.off[i] = offsets[i];
  issue_tma_load(t, dst, rank, coords, bar, loc);
}

namespace {
// A TMA store: the box read from shared memory, its elements inside the tensor written to global memory.
void perform_tma_store(const TmaStore& t) {
  const unsigned char* src = shared_ptr(t.src, box_bytes(t.map), "cp.async.bulk.tensor (store)", t.loc);
  walk_box(
      t.map, t.c,
      [&](uint32_t at, unsigned char* global) {
        if (global) {
          tsan_read(src + at, t.map.elem_bytes);
          tsan_write(global, t.map.elem_bytes);
          std::memcpy(global, src + at, t.map.elem_bytes);
        }
      },
      /*whole_granules=*/true);
}
}  // namespace

void tma_store(uint64_t tensor_map, int rank, const int32_t* coords, uint32_t src, const Loc& loc) {
  const TsanQuiet tsan_quiet;
  check_in_kernel("cp.async.bulk.tensor (store)");
  g_tma_stores.fetch_add(1);
  TmaStore t;
  t.map = checked_map(tensor_map, rank, src, "cp.async.bulk.tensor (store)", loc);
  for (uint32_t i = 1; i < t.map.rank; ++i)
    if (t.map.step[i] != 1)
      fatal("cp.async.bulk.tensor (store) at %s:%u: element strides other than 1 are not emulated for stores",
            short_file(loc.file_name()), loc.line());
  t.src = src, t.loc = loc;
  for (int i = 0; i < kTensorMapMaxRank; ++i) t.c[i] = i < rank ? coords[i] : 0;
  // CUDA_EMU_TMA=early performs the store now (the earliest CUDA allows: shared memory written after it does not
  // show); the default, late, when a wait covers its group (a write of the buffer before that wait shows)
  const char* mode = std::getenv("CUDA_EMU_TMA");
  if (mode && std::strcmp(mode, "early") == 0)
    perform_tma_store(t);
  else
    E.b->cur->bulk_stores.push_back(t);
}

void bulk_commit_group(const Loc&) {
  const TsanQuiet tsan_quiet;
  check_in_kernel("cp.async.bulk.commit_group");
  E.b->cur->bulk_group_ends.push_back(E.b->cur->bulk_stores.size());  // possibly an empty group, as PTX allows
}

void bulk_wait_group(int n, const Loc&) {
  const TsanQuiet tsan_quiet;
  check_in_kernel("cp.async.bulk.wait_group");
  Fiber& f = *E.b->cur;
  const int groups = int(f.bulk_group_ends.size());
  if (groups <= n) return;
  const size_t upto = f.bulk_group_ends[size_t(groups - n - 1)];
  for (size_t i = 0; i < upto; ++i) perform_tma_store(f.bulk_stores[i]);
  f.bulk_stores.erase(f.bulk_stores.begin(), f.bulk_stores.begin() + std::ptrdiff_t(upto));
  f.bulk_group_ends.erase(f.bulk_group_ends.begin(), f.bulk_group_ends.begin() + (groups - n));
  for (size_t& e : f.bulk_group_ends) e -= upto;
}

void fence_proxy_async(const Loc&) {
  const TsanQuiet tsan_quiet;
  check_in_kernel("fence.proxy.async");
}

void prefetch_global_l2(uint64_t addr, const Loc& loc) {
  const TsanQuiet tsan_quiet;
  check_in_kernel("prefetch.global.L2");
  if (!in_device_memory(reinterpret_cast<const void*>(uintptr_t(addr)), 1))
    fatal("prefetch.global.L2 at %s:%u: address 0x%llx lies in no device allocation", short_file(loc.file_name()),
          loc.line(), (unsigned long long)addr);
  std::lock_guard<std::mutex> lock(g_prefetch_mutex);
  g_prefetched.insert(uintptr_t(addr) & ~uintptr_t(127));
}

void setmaxnreg(int n, const Loc& loc) {
  const TsanQuiet tsan_quiet;
  check_in_kernel("setmaxnreg");
  if (n % 8 || n < 24 || n > 256)
    fatal("setmaxnreg at %s:%u: %d registers; PTX takes a multiple of 8 in [24, 256]", short_file(loc.file_name()),
          loc.line(), n);
}

void wgmma_fence(const Loc& loc) {
  const TsanQuiet tsan_quiet;
  check_in_kernel("wgmma.fence");
  E.b->cur->wgmma_fenced = true;
  collective(0xffffffffu, 70, "wgmma.fence", loc, true, nullptr);
}

void wgmma_m64nNk16(int n, int ab_type, float* const* d, uint64_t desc_a, uint64_t desc_b, bool scale_d, int scale_a,
                    int scale_b, int trans_a, int trans_b, const Loc& loc) {
  const TsanQuiet tsan_quiet;
  check_in_kernel("wgmma.mma_async");
  if (scale_a != 1 || scale_b != 1)
    fatal("wgmma at %s:%u: imm-scale-a/b other than 1 (negated operands) are not emulated", short_file(loc.file_name()),
          loc.line());
  if ((trans_a != 0 && trans_a != 1) || (trans_b != 0 && trans_b != 1))
    fatal("wgmma at %s:%u: imm-trans-a/b must be 0 or 1, got %d and %d", short_file(loc.file_name()), loc.line(),
          trans_a, trans_b);
  if (blockDim.x * blockDim.y * blockDim.z % 128)
    fatal("wgmma at %s:%u: the block's %u threads are not whole warpgroups of 128", short_file(loc.file_name()),
          loc.line(), blockDim.x * blockDim.y * blockDim.z);
  check_wgmma_desc(desc_a, trans_a == 1, "A", loc);
  check_wgmma_desc(desc_b, trans_b == 1, "B", loc);
  // PTX asks for wgmma.fence before a warpgroup's first wgmma.mma_async and between any other access of its
  // accumulator (or A-fragment) registers and a wgmma that uses them; the emulator cannot see register accesses,
  // so it asks for one after the start and after every wgmma.wait_group (past which code reads the accumulators):
  // without it the MMA races with the registers on a GPU, while the emulator, performing MMAs at the wait, would
  // not notice.
  if (!E.b->cur->wgmma_fenced)
    fatal(
        "wgmma at %s:%u: no wgmma.fence since the kernel's start or this thread's last wgmma.wait_group (PTX: the "
        "accumulators race with other accesses to them otherwise)",
        short_file(loc.file_name()), loc.line());
  Wgmma w;
  w.n = n, w.ab_type = ab_type, w.desc_a = desc_a, w.desc_b = desc_b, w.scale_d = scale_d, w.loc = loc;
  w.mn_a = trans_a == 1, w.mn_b = trans_b == 1;
  w.d.assign(d, d + n / 2);
  E.b->cur->wgmmas.push_back(std::move(w));
  collective(0xffffffffu, 71, "wgmma.mma_async", loc, true, nullptr);
}

void wgmma_commit_group(const Loc& loc) {
  const TsanQuiet tsan_quiet;
  check_in_kernel("wgmma.commit_group");
  E.b->cur->wgmma_group_ends.push_back(E.b->cur->wgmmas.size());
  collective(0xffffffffu, 72, "wgmma.commit_group", loc, true, nullptr);
}

void wgmma_wait_group(int n, const Loc& loc) {
  const TsanQuiet tsan_quiet;
  check_in_kernel("wgmma.wait_group");
  E.b->cur->wgmma_fenced = false;
  in_as<int32_t>(*E.b->cur) = n;
  collective(0xffffffffu, 73, "wgmma.wait_group", loc, true, [](Fiber* lanes, uint32_t mask) {
    Fiber& f0 = lanes[std::countr_zero(mask)];
    const int keep = in_as<int32_t>(f0);
    const int groups = int(f0.wgmma_group_ends.size());
    if (groups <= keep) return;
    const size_t upto = f0.wgmma_group_ends[size_t(groups - keep - 1)];
    perform_wgmmas(lanes, mask, upto);
    for (uint32_t m = mask; m; m &= m - 1) {
      Fiber& f = lanes[std::countr_zero(m)];
      f.wgmma_group_ends.erase(f.wgmma_group_ends.begin(), f.wgmma_group_ends.begin() + (groups - keep));
    }
  });
}

}  // namespace ptx

// ---- fatal signals during a launch ------------------------------------------------------------------------
namespace {
struct sigaction g_old_segv, g_old_bus;

void on_fault(int sig, siginfo_t* info, void*) {
  // Let the previous handler (the default, or a sanitizer's) report the fault when it recurs.
  sigaction(SIGSEGV, &g_old_segv, nullptr);
  sigaction(SIGBUS, &g_old_bus, nullptr);
  if (!E.in_launch) return;
  // Only async-signal-tolerant work: we are going down anyway.
  const auto* a = static_cast<const unsigned char*>(info->si_addr);
  std::fprintf(stderr, "cuda_emu: %s at address %p during a kernel\n",
               sig == SIGSEGV ? "segmentation fault" : "bus error", info->si_addr);
  if (E.b->window && a >= E.b->window && a < E.b->window + kWindow) {
    const size_t off = size_t(a - E.b->window);
    if (off >= kDynBegin && off < kDynEnd + kPage)
      std::fprintf(stderr,
                   "  shared memory out of bounds: byte offset %lld of the %zu bytes of dynamic shared memory\n",
                   (long long)off - (long long)E.b->dyn_start, E.b->dyn_bytes);
    else
      std::fprintf(stderr, "  shared memory out of bounds (static __shared__ area, offset %zu)\n", off);
  } else if (E.b->cur && E.b->cur->stack && a >= reinterpret_cast<const unsigned char*>(E.b->cur->stack->lo) - kPage &&
             a < reinterpret_cast<const unsigned char*>(E.b->cur->stack->lo)) {
    std::fprintf(stderr, "  fiber stack overflow: raise CUDA_EMU_STACK_KB (now %zu)\n", E.stack_bytes / 1024);
  } else {
    describe_global_fault(a);
  }
  print_context(stderr);
  std::fflush(stderr);
}

void install_fault_handler() {
  static bool done = false;
  if (done) return;
  done = true;
  static std::vector<char> alt(256 * 1024);
  stack_t ss{};
  ss.ss_sp = alt.data();
  ss.ss_size = alt.size();
  sigaltstack(&ss, nullptr);
  struct sigaction sa {};
  sa.sa_sigaction = on_fault;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGSEGV, &sa, &g_old_segv);
  sigaction(SIGBUS, &sa, &g_old_bus);
}
}  // namespace

// ---- launch ------------------------------------------------------------------------------------------------
namespace {
// CUDA_EMU_STATS=1: time spent per kernel, printed at exit (where emulation time goes).
struct KernelStats {
  long long ns = 0, launches = 0, threads = 0;
  uint64_t ldm_wavefronts = 0, ldm_ideal = 0, cp_wavefronts = 0, cp_ideal = 0;
};
std::map<std::string, KernelStats>* g_stats = nullptr;

bool stats_enabled() {
  static const bool on = [] {
    const char* e = std::getenv("CUDA_EMU_STATS");
    return e && *e && *e != '0';
  }();
  return on;
}

void print_stats() {
  std::vector<std::pair<std::string, KernelStats>> v(g_stats->begin(), g_stats->end());
  std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.second.ns > b.second.ns; });
  std::fprintf(stderr,
               "cuda_emu stats: seconds, launches, threads, shared-memory wavefronts over the conflict-free count of "
               "ldmatrix reads and of cp.async writes (1.00: no bank conflicts; -: none issued), kernel\n");
  for (const auto& [name, st] : v) {
    char ldm[32] = "    -", cp[32] = "    -";
    if (st.ldm_ideal) std::snprintf(ldm, sizeof ldm, "%5.2f", double(st.ldm_wavefronts) / double(st.ldm_ideal));
    if (st.cp_ideal) std::snprintf(cp, sizeof cp, "%5.2f", double(st.cp_wavefronts) / double(st.cp_ideal));
    std::fprintf(stderr, "%10.3f %8lld %12lld %s %s  %s\n", double(st.ns) * 1e-9, st.launches, st.threads, ldm, cp,
                 name.c_str());
  }
}

bool g_count_banks = false;  // count_bank_conflicts(true)
BankCounts g_banks{};

struct LaunchTally {
  unsigned long long launches = 0;
  long long ns = 0;  // host time spent emulating them
};
std::map<std::string, LaunchTally>& launch_names() {  // launches_named and the launch log: every launch, by kernel
  static auto* m = new std::map<std::string, LaunchTally>;
  return *m;
}

void record_stats(long long ns, uint64_t threads) {
  if (!g_stats) {
    g_stats = new std::map<std::string, KernelStats>;
    std::atexit(print_stats);
  }
  KernelStats& st = (*g_stats)[E.kernel_name ? E.kernel_name : "?"];
  st.ns += ns;
  st.launches += 1;
  st.threads += (long long)threads;
  st.ldm_wavefronts += E.ldm_wavefronts;
  st.ldm_ideal += E.ldm_ideal;
  st.cp_wavefronts += E.cp_wavefronts;
  st.cp_ideal += E.cp_ideal;
}
// CUDA_EMU_DISPATCH=reverse: blocks are dispatched from the last index down (forward, the default: from 0 up, as
// GPUs do, though CUDA does not promise it), read at every launch.
bool dispatch_in_reverse() {
  const char* e = std::getenv("CUDA_EMU_DISPATCH");
  if (!e || !*e || std::strcmp(e, "forward") == 0) return false;
  if (std::strcmp(e, "reverse") == 0) return true;
  fatal("CUDA_EMU_DISPATCH=%s: expected forward or reverse", e);
}

// CUDA_EMU_RESIDENT: how many blocks of a launch are resident at once (1 to 64; 1 by default), read at every
// launch (tests switch it).
int resident_setting() {
  const char* e = std::getenv("CUDA_EMU_RESIDENT");
  if (!e || !*e) return 1;
  char* end = nullptr;
  const long r = std::strtol(e, &end, 10);
  if (*end || r < 1 || r > 64) fatal("CUDA_EMU_RESIDENT=%s: expected a number of blocks from 1 to 64", e);
  return int(r);
}

}  // namespace

void launch_impl(const Loc& where, const void* kernel, const LaunchConfig& cfg, void (*thunk)(void*), void* ctx) {
  const dim3 g = cfg.grid, b = cfg.block;
  const uint64_t threads = uint64_t(b.x) * b.y * b.z;
  if (g.x == 0 || g.y == 0 || g.z == 0 || b.x == 0 || b.y == 0 || b.z == 0 || threads > kMaxThreadsPerBlock ||
      b.x > 1024 || b.y > 1024 || b.z > 64 || g.y > 65535 || g.z > 65535 || g.x > 0x7fffffffu) {
    set_last_error(cudaErrorInvalidConfiguration);
    return;
  }
  if (cfg.smem > max_dynamic_smem(kernel)) {
    set_last_error(cudaErrorInvalidValue);
    return;
  }
  if (!is_live_stream(cfg.stream)) {
    set_last_error(cudaErrorInvalidResourceHandle);
    return;
  }
  static thread_local bool launching = false;
  if (launching) fatal("kernel launched from inside a kernel (dynamic parallelism is not emulated)");
  std::lock_guard<std::mutex> lock(E.mutex);
  launching = true;
  install_fault_handler();
  E.in_launch = true;
  E.launch_loc = where;
  E.kernel_name = nullptr;
  E.kernel = kernel;
  E.thunk = thunk;
  E.ctx = ctx;
  E.n = int(threads);
  if (E.order_mode.empty()) {
    const char* e = std::getenv("CUDA_EMU_ORDER");
    E.order_mode = e ? e : "alternate";
    if (E.order_mode != "forward" && E.order_mode != "reverse" && E.order_mode != "random" &&
        E.order_mode != "alternate")
      fatal("CUDA_EMU_ORDER=%s: expected forward, reverse, random or alternate", e);
    if (const char* sd = std::getenv("CUDA_EMU_SEED")) E.seed = std::strtoull(sd, nullptr, 0);
  }
  {
    const char* sched = std::getenv("CUDA_EMU_SCHEDULE");  // read at every launch: tests switch it
    if (sched && std::strcmp(sched, "warp") != 0 && std::strcmp(sched, "roundrobin") != 0)
      fatal("CUDA_EMU_SCHEDULE=%s: expected roundrobin or warp", sched);
    E.warp_greedy = sched && std::strcmp(sched, "warp") == 0;
  }
  gridDim = g;
  blockDim = b;
#if CUDA_EMU_TSAN
  E.main.tsan = __tsan_get_current_fiber();  // the host thread that launches
#endif
  E.resident = resident_setting();
  E.spin_rounds = 0;
  while (E.slots.size() < size_t(E.resident)) E.slots.push_back(new Block);
  const int nwarps = int((threads + 31) / 32);
  for (int k = 0; k < E.resident; ++k) {  // the slots' storage for this launch's blocks
    E.b = E.slots[size_t(k)];
    if (E.b->fibers.size() < threads) E.b->fibers.resize(threads);
    E.b->order.resize(threads);
    E.b->warps.assign(size_t(nwarps), Warp{});
    for (int i = 0; i < E.n; ++i) {
      Fiber& f = E.b->fibers[size_t(i)];
      f.index = i;
      f.ctx.tsan = tsan_fiber(E.b, i);
      f.tid = {unsigned(i) % b.x, (unsigned(i) / b.x) % b.y, unsigned(i) / (b.x * b.y)};
      E.b->warps[size_t(i / 32)].exists |= 1u << (i % 32);
    }
    setup_window(cfg.smem);
  }
  E.ldm_wavefronts = E.ldm_ideal = E.cp_wavefronts = E.cp_ideal = E.st_wavefronts = E.st_ideal = 0;
  E.stats = stats_enabled() || g_count_banks;
  const long long t0 = clock_ns();
  // Blocks are dispatched in index order (x fastest), as a GPU does (CUDA_EMU_DISPATCH=reverse: from the last; CUDA
  // promises no order), up to E.resident at a time. The resident
  // ones take turns, each until it is done or yields (block_yield: at __nanosleep when every runnable thread of
  // it spins, at __threadfence), in the order newest to oldest, round and round; the first turn is the newest's,
  // so that later blocks reach their waits before earlier ones have done what they wait for. With one resident
  // block (the default) every block runs to its end before the next starts.
  const uint64_t total = uint64_t(g.x) * g.y * g.z;
  const bool dispatch_reverse = E.dispatch_reverse = dispatch_in_reverse();
  std::vector<Block*> active;  // resident blocks, newest first
  std::vector<Block*> free_slots(E.slots.begin(), E.slots.begin() + E.resident);
  uint64_t next = 0;
  size_t turn = 0;
  for (;;) {
    while (!free_slots.empty() && next < total) {  // dispatch
      E.b = free_slots.back();
      free_slots.pop_back();
      const uint64_t lin = dispatch_reverse ? total - 1 - next : next;
      ++next;
      const uint3 idx{unsigned(lin % g.x), unsigned(lin / g.x % g.y), unsigned(lin / (uint64_t(g.x) * g.y))};
      init_block(lin, idx);
      begin_block_smem();
      tsan_release(&E.b->sync_start);
      active.insert(active.begin(), E.b);
      ++turn;  // the same block's turn comes next (at the start: past the end, so the newest)
    }
    if (active.empty()) break;
    if (turn >= active.size()) turn = 0;
    E.b = active[turn];
    blockIdx = E.b->idx;
    if (!run_block()) {  // yielded: the next resident block
      ++turn;
      continue;
    }
    tsan_acquire(&E.b->sync_end);
    if (E.stats) {
      tally_writes(E.b->cp_by_warp, E.cp_wavefronts, E.cp_ideal);
      tally_writes(E.b->st_by_warp, E.st_wavefronts, E.st_ideal);
    }
    end_block_smem();
    E.spin_rounds = 0;
    active.erase(active.begin() + std::ptrdiff_t(turn));
    free_slots.push_back(E.b);
  }
  E.b = E.slots[0];
  threadIdx = {0, 0, 0};
  blockIdx = {0, 0, 0};
  E.in_launch = false;
  launching = false;
  const long long ns = clock_ns() - t0;
  if (stats_enabled()) record_stats(ns, threads * g.x * g.y * g.z);
  LaunchTally& tally = launch_names()[E.kernel_name ? E.kernel_name : "?"];
  ++tally.launches;
  tally.ns += ns;
  g_banks.ldmatrix_wavefronts += E.ldm_wavefronts;
  g_banks.ldmatrix_ideal += E.ldm_ideal;
  g_banks.cp_async_wavefronts += E.cp_wavefronts;
  g_banks.cp_async_ideal += E.cp_ideal;
  g_banks.st_shared_wavefronts += E.st_wavefronts;
  g_banks.st_shared_ideal += E.st_ideal;
}

// The emulator's own counters (tests read them right after a call): under CUDA_EMU_STREAMS=lazy|random the work
// queued so far runs first, so that they count what it does, as in the eager mode.
void count_bank_conflicts(bool on) {
  drain_stream(nullptr);
  g_count_banks = on;
  g_banks = BankCounts{};
}

BankCounts bank_counts() {
  drain_stream(nullptr);
  return g_banks;
}

unsigned long long tma_stores() {
  drain_stream(nullptr);
  return g_tma_stores.load();
}
unsigned long long tma_im2col_loads() {
  drain_stream(nullptr);
  return g_tma_im2col_loads.load();
}

unsigned long long block_yields() {
  drain_stream(nullptr);
  return g_block_yields.load();
}

int resident_blocks() { return resident_setting(); }

std::vector<uintptr_t> prefetched_lines() {
  std::lock_guard<std::mutex> lock(g_prefetch_mutex);
  return {g_prefetched.begin(), g_prefetched.end()};
}

void clear_prefetched_lines() {
  std::lock_guard<std::mutex> lock(g_prefetch_mutex);
  g_prefetched.clear();
}

// CUDA_EMU_LAUNCH_LOG=DIR: at exit, DIR/<executable>.<pid>.launches names every kernel this process launched, how
// often and the seconds spent emulating them ("<launches>\t<seconds>\t<kernel>"), after a first line with its
// arguments (a test's --gtest_filter): which kernels each test case reaches, read by
// scripts/gpu/sanitizer_coverage.py to check that the GPU's sanitizer runs reach them all.
void write_launch_log() {
  const std::string dir = std::getenv("CUDA_EMU_LAUNCH_LOG");
  std::string args;
  if (FILE* f = std::fopen("/proc/self/cmdline", "rb")) {
    for (int c; (c = std::fgetc(f)) != EOF;) args += c ? char(c) : ' ';
    std::fclose(f);
  }
  std::string exe = args.substr(0, args.find(' '));
  exe = exe.substr(exe.rfind('/') + 1);
  const std::string path = dir + "/" + exe + "." + std::to_string(getpid()) + ".launches";
  mkdir(dir.c_str(), 0777);  // the first process makes it (an error shows at the fopen)
  FILE* f = std::fopen(path.c_str(), "w");
  if (!f) {
    std::fprintf(stderr, "cuda_emu: CUDA_EMU_LAUNCH_LOG: cannot write %s: %s\n", path.c_str(), std::strerror(errno));
    return;
  }
  while (!args.empty() && args.back() == ' ') args.pop_back();
  std::fprintf(f, "# %s\n", args.c_str());
  for (const auto& [name, t] : launch_names())
    std::fprintf(f, "%llu\t%.6f\t%s\n", t.launches, double(t.ns) * 1e-9, name.c_str());
  if (std::fclose(f) != 0)
    std::fprintf(stderr, "cuda_emu: CUDA_EMU_LAUNCH_LOG: cannot write %s: %s\n", path.c_str(), std::strerror(errno));
}

unsigned long long launches_named(const char* part) {
  drain_stream(nullptr);
  unsigned long long n = 0;
  for (const auto& [name, t] : launch_names())
    if (name.find(part) != std::string::npos) n += t.launches;
  return n;
}

}  // namespace cuda_emu

// ---- the fiber's first frame ---------------------------------------------------------------------------------
extern "C" void cuda_emu_fiber_main() {
  using namespace cuda_emu;
#if CUDA_EMU_ASAN
  {
    const void* lo = nullptr;
    size_t size = 0;
    __sanitizer_finish_switch_fiber(nullptr, &lo, &size);
    if (E.from_main) E.main.stack_lo = lo, E.main.stack_size = size;
  }
#endif
  E.from_main = false;
  recycle_zombie();
  for (;;) {
    Fiber* me = E.b->cur;
#if CUDA_EMU_TSAN
    if (me->tsan_quiet) {  // it left the last block it ran in the emulator's code
      me->tsan_quiet = false;
      __tsan_ignore_thread_end();
    }
#endif
    tsan_acquire(&E.b->sync_start);
    try {
      E.thunk(E.ctx);
    } catch (const std::exception& e) {
      fatal("exception escaped a kernel: %s", e.what());
    } catch (...) {
      fatal("exception escaped a kernel");
    }
    // Finish what the thread issued (the GPU would), then leave for good.
#if CUDA_EMU_TSAN
    me->tsan_quiet = true;  // the emulator's code from here on (ended when the thread starts in a later block)
    __tsan_ignore_thread_begin();
#endif
    ptx::cp_async_wait_all(Loc::current());
    if (!me->wgmmas.empty())
      fatal("thread exited with %zu wgmma.mma_async issued at %s:%u and never waited for (wgmma.wait_group): its "
            "accumulators are undefined",
            me->wgmmas.size(), short_file(me->wgmmas.front().loc.file_name()), me->wgmmas.front().loc.line());
    if (!me->bulk_stores.empty())
      fatal("thread exited with %zu TMA stores issued at %s:%u and never waited for (cp.async.bulk.wait_group): "
            "the block's shared memory they read may be gone before TMA reads it",
            me->bulk_stores.size(), short_file(me->bulk_stores.front().loc.file_name()),
            me->bulk_stores.front().loc.line());
    tsan_release(&E.b->sync_end);
    me->state = kDone;
    ++E.b->ndone;
    Warp& w = E.b->warps[size_t(me->index / 32)];
    const uint32_t bit = 1u << (me->index % 32);
    w.exited |= bit;
    // Collectives that waited only for this lane now complete without it (PTX: non-exited lanes), except the
    // .aligned ones, which need the whole warp.
    for (int i = 0; i < w.npending;) {
      const Pending& p = w.pending[i];
      if ((p.mask & bit) && p.aligned)
        fatal("thread exited while lanes 0x%08x of its warp wait for it in %s at %s:%u", p.arrived, p.what,
              short_file(p.loc.file_name()), p.loc.line());
      if ((p.mask & bit) && p.arrived == (p.mask & ~w.exited))
        complete(w, i, &E.b->fibers[size_t(me->index - me->index % 32)], -1);
      else
        ++i;
    }
    if (E.b->bar_arrived > 0)
      fatal(
          "thread exited while %d thread(s) wait at __syncthreads() at %s:%u (thread %d first): every thread of "
          "the block must reach the barrier",
          E.b->bar_arrived, short_file(E.b->bar_loc.file_name()), E.b->bar_loc.line(), E.b->bar_first);
    Fiber* next = next_runnable(me->pos);
    if (!CUDA_EMU_TSAN && next && next->state == kNew) {
      // A thread that has not started yet runs on this stack: no switch at all.
      next->stack = me->stack;
      next->ctx.stack_lo = me->ctx.stack_lo;
      next->ctx.stack_size = me->ctx.stack_size;
      me->stack = nullptr;
      next->state = kReady;
      make_current(next);
      continue;
    }
    if (!CUDA_EMU_TSAN) E.zombie = me->stack;  // (racecheck: each thread keeps its own)
    me->stack = nullptr;
    if (next) {
      if (next->state == kNew) start_fiber(next);
      next->state = kReady;
      make_current(next);
      switch_context(me->ctx, next->ctx, true);
    } else {
      if (E.b->ndone != E.n) deadlock();
      switch_context(me->ctx, E.main, true);  // the block is done
    }
    __builtin_unreachable();
  }
}
