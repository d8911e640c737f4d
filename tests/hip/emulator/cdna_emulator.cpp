// Fiber scheduler, barriers, cross-lane operations and the fake runtime of the CPU
// emulator described in cdna_emulator.h.
#include "cdna_emulator.h"

#include <setjmp.h>
#include <ucontext.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

namespace flash_emu {
namespace {

constexpr size_t kStackBytes = 256 * 1024;

// A fiber is entered once through makecontext/swapcontext; every later switch uses
// _setjmp/_longjmp, which (unlike swapcontext) does not save the signal mask with a
// system call per switch.
struct Fiber {
  ucontext_t context;
  jmp_buf jump;
  ThreadState state;
  bool started = false;
  bool done = false;
};

struct Barrier {
  int arrived = 0;
  long generation = 0;
};

struct Block {
  std::vector<Fiber> fibers;
  std::vector<std::vector<char>> stacks;
  ucontext_t scheduler;
  jmp_buf scheduler_jump;
  Fiber* running = nullptr;
  long progress = 0;  // completed barriers + finished fibers
  Barrier block_barrier;
  std::vector<Barrier> wave_barriers;
  // Per-thread exchange slots for cross-lane operations.
  std::vector<float> shuffle_slot;
  std::vector<float> a_slot, b_slot;  // 4 values per thread
  const std::function<void()>* body = nullptr;
};

Block g_block;

int env_wave() {
  const char* v = std::getenv("FLASH_EMU_WAVE");
  return v && std::atoi(v) == 32 ? 32 : 64;
}

int thread_index() {
  const ThreadState& s = g_block.running->state;
  return static_cast<int>(s.thread_idx.x +
                          s.block_dim.x * (s.thread_idx.y + s.block_dim.y * s.thread_idx.z));
}
int threads_per_block() {
  const ThreadState& s = g_block.running->state;
  return static_cast<int>(s.block_dim.x * s.block_dim.y * s.block_dim.z);
}

void yield() {
  if (_setjmp(g_block.running->jump) == 0) _longjmp(g_block.scheduler_jump, 1);
}

void wait(Barrier& b, int count) {
  const long generation = b.generation;
  if (++b.arrived == count) {
    b.arrived = 0;
    ++b.generation;
    ++g_block.progress;
    return;
  }
  while (b.generation == generation) yield();
}

int wave_of(int t) { return t / wave_size(); }
int wave_members(int wave) {
  const int n = threads_per_block(), first = wave * wave_size();
  return n - first < wave_size() ? n - first : wave_size();
}
void wave_barrier() {
  const int w = wave_of(thread_index());
  wait(g_block.wave_barriers[w], wave_members(w));
}

[[noreturn]] void trampoline() {
  (*g_block.body)();
  g_block.running->done = true;
  ++g_block.progress;
  _longjmp(g_block.scheduler_jump, 1);  // never return into the (stale) uc_link context
}

}  // namespace

ThreadState& current() { return g_block.running->state; }
int wave_size() {
  static const int w = env_wave();
  return w;
}

void syncthreads() { wait(g_block.block_barrier, threads_per_block()); }

float shfl_xor(float v, int lane_mask, int width) {
  const int t = thread_index(), lane = t % wave_size(), base = t - lane;
  g_block.shuffle_slot[t] = v;
  wave_barrier();
  int src = (lane & ~(width - 1)) | ((lane & (width - 1)) ^ lane_mask);
  if (src >= wave_size()) src = lane;
  const float r = g_block.shuffle_slot[base + src];
  wave_barrier();
  return r;
}

namespace {
// One 32x32 MFMA with K = 4 * kPerLane... generalised: K values spread as
// A[i][k]: lane i + 32 * (k / kPer), element k % kPer (B likewise with j);
// C[i][j]: lane j + 32 * ((i / 4) % 2), register (i % 4) + 4 * (i / 8).
template <int kPer>
f32x16 mfma(const float (&a)[kPer], const float (&b)[kPer], f32x16 c) {
  if (wave_size() != 64) {
    std::fprintf(stderr, "emulator: MFMA executed with wave size %d\n", wave_size());
    std::abort();
  }
  const int t = thread_index(), lane = t % 64, base = t - lane;
  for (int e = 0; e < kPer; ++e) g_block.a_slot[4 * t + e] = a[e], g_block.b_slot[4 * t + e] = b[e];
  wave_barrier();
  const int j = lane % 32, half = lane / 32;
  f32x16 d;
  for (int r = 0; r < 16; ++r) {
    const int i = 8 * (r / 4) + 4 * half + r % 4;
    float sum = c[r];
    for (int k = 0; k < 2 * kPer; ++k) {
      const float av = g_block.a_slot[4 * (base + i + 32 * (k / kPer)) + k % kPer];
      const float bv = g_block.b_slot[4 * (base + j + 32 * (k / kPer)) + k % kPer];
      sum += av * bv;
    }
    d[r] = sum;
  }
  wave_barrier();
  return d;
}
float bf16(short s) {
  return __uint_as_float(static_cast<uint32_t>(static_cast<uint16_t>(s)) << 16);
}
}  // namespace

f32x16 mfma_32x32x8_f16(f16x4 a, f16x4 b, f32x16 c) {
  float fa[4], fb[4];
  for (int e = 0; e < 4; ++e) fa[e] = static_cast<float>(a[e]), fb[e] = static_cast<float>(b[e]);
  return mfma<4>(fa, fb, c);
}
f32x16 mfma_32x32x8_bf16(s16x4 a, s16x4 b, f32x16 c) {
  float fa[4], fb[4];
  for (int e = 0; e < 4; ++e) fa[e] = bf16(a[e]), fb[e] = bf16(b[e]);
  return mfma<4>(fa, fb, c);
}
f32x16 mfma_32x32x4_bf16(s16x2 a, s16x2 b, f32x16 c) {
  float fa[2], fb[2];
  for (int e = 0; e < 2; ++e) fa[e] = bf16(a[e]), fb[e] = bf16(b[e]);
  return mfma<2>(fa, fb, c);
}

void run_grid(dim3 grid, dim3 block, const std::function<void()>& body) {
  const int n = static_cast<int>(block.x * block.y * block.z);
  Block& b = g_block;
  b.fibers.assign(n, Fiber{});
  if (static_cast<int>(b.stacks.size()) < n) b.stacks.resize(n, std::vector<char>(kStackBytes));
  b.shuffle_slot.assign(n, 0.f);
  b.a_slot.assign(4 * n, 0.f);
  b.b_slot.assign(4 * n, 0.f);
  b.body = &body;
  for (unsigned bz = 0; bz < grid.z; ++bz)
    for (unsigned by = 0; by < grid.y; ++by)
      for (unsigned bx = 0; bx < grid.x; ++bx) {
        b.block_barrier = Barrier{};
        b.wave_barriers.assign((n + wave_size() - 1) / wave_size(), Barrier{});
        for (int t = 0; t < n; ++t) {
          Fiber& f = b.fibers[t];
          f.done = false;
          f.started = false;
          f.state.thread_idx = dim3(t % block.x, (t / block.x) % block.y, t / (block.x * block.y));
          f.state.block_idx = dim3(bx, by, bz);
          f.state.block_dim = block;
          f.state.grid_dim = grid;
          getcontext(&f.context);
          f.context.uc_stack.ss_sp = b.stacks[t].data();
          f.context.uc_stack.ss_size = kStackBytes;
          f.context.uc_link = nullptr;
          makecontext(&f.context, trampoline, 0);
        }
        int live = n;
        while (live > 0) {
          const long before = b.progress;
          live = 0;
          for (Fiber& f : b.fibers) {
            if (f.done) continue;
            b.running = &f;
            if (_setjmp(b.scheduler_jump) == 0) {
              if (!f.started) {
                f.started = true;
                swapcontext(&b.scheduler, &f.context);
              } else {
                _longjmp(f.jump, 1);
              }
            }
            if (!f.done) ++live;
          }
          if (live > 0 && b.progress == before) {
            std::fprintf(stderr,
                         "emulator: deadlock in block (%u,%u,%u): %d threads wait at a "
                         "barrier that the others never reach\n",
                         bx, by, bz, live);
            std::abort();
          }
        }
      }
  b.running = nullptr;
}

}  // namespace flash_emu

// ---- fake runtime ----------------------------------------------------------------
// "Device" memory is what hipMalloc returned; any other pointer is host memory, which
// hipPointerGetAttributes rejects as HIP 5.2 does, so the backend's staging runs.
namespace {
std::map<const char*, size_t>& allocations() {
  static std::map<const char*, size_t> m;
  return m;
}
hipError_t g_last_error = hipSuccess;
}  // namespace

const char* hipGetErrorString(hipError_t e) {
  return e == hipSuccess         ? "hipSuccess"
         : e == hipErrorNoDevice ? "hipErrorNoDevice"
                                 : "hipErrorInvalidValue";
}
hipError_t hipGetLastError() {
  const hipError_t e = g_last_error;
  g_last_error = hipSuccess;
  return e;
}
hipError_t hipGetDeviceCount(int* n) {
  *n = 1;
  return hipSuccess;
}
hipError_t hipGetDevice(int* d) {
  *d = 0;
  return hipSuccess;
}
hipError_t hipGetDeviceProperties(hipDeviceProp_t* prop, int) {
  const char* arch = std::getenv("FLASH_EMU_ARCH");
#if defined(__gfx908__)
  if (!arch) arch = "gfx908";
#else
  if (!arch) arch = "gfx90a";
#endif
  std::snprintf(prop->name, sizeof prop->name, "CPU emulator (wave%d)", flash_emu::wave_size());
  std::snprintf(prop->gcnArchName, sizeof prop->gcnArchName, "%s:sramecc+:xnack-", arch);
  prop->warpSize = flash_emu::wave_size();
  // A small device: the split-KV plan (split_kv.h) cuts a decode's keys as it would on a
  // GPU whose compute units a few blocks cannot fill.
  prop->multiProcessorCount = 8;
  return hipSuccess;
}
hipError_t hipPointerGetAttributes(hipPointerAttribute_t* attr, const void* p) {
  const char* c = static_cast<const char*>(p);
  auto it = allocations().upper_bound(c);
  if (it != allocations().begin()) {
    --it;
    if (c < it->first + it->second) {
      attr->memoryType = hipMemoryTypeDevice;
      attr->isManaged = 0;
      return hipSuccess;
    }
  }
  return g_last_error = hipErrorInvalidValue;
}
hipError_t hipMalloc(void** p, size_t bytes) {
  *p = std::malloc(bytes ? bytes : 1);
  if (!*p) return g_last_error = hipErrorInvalidValue;
  allocations()[static_cast<const char*>(*p)] = bytes ? bytes : 1;
  return hipSuccess;
}
hipError_t hipFree(void* p) {
  allocations().erase(static_cast<const char*>(p));
  std::free(p);
  return hipSuccess;
}
hipError_t hipMemcpyAsync(void* dst, const void* src, size_t n, hipMemcpyKind, hipStream_t) {
  std::memcpy(dst, src, n);
  return hipSuccess;
}
hipError_t hipStreamSynchronize(hipStream_t) { return hipSuccess; }
