// The AMX path (AMX-INT8: Intel Xeon from Sapphire Rapids on): the integer dots of up to 16
// activation rows with one block of a pair of tiles (16 output rows) in one tile product, the
// contract's float epilogue on 16 lanes as the AVX-512 path computes it.
//
// Per block g of a pair: A = the rows' 32 activation codes of block g (tile rows m, 32 bytes,
// straight from QuantizedRows, row stride k); B = the pair's codes regrouped so that B row c is
// the 4-element group c of the first tile's 8 rows, then of the second's ([8 rows, 64 bytes]:
// AMX's "VNNI" layout of K = 32 by N = 16, built in a 512-byte scratch: U4 codes unpacked from
// their nibbles, S8 codes side by side); C = A . B, tile rows m of 16 int32 = each output row's
// exact dot with block g (`tdpbssd`; `tdpbsud` for the unsigned 4-bit codes). S8F needs the dots
// of elements 0..15 and 16..31 apart: A and B split in halves, two products. C goes to memory,
// and the epilogue reads row i's 16 dots as one vector: every output gets the same float
// operations in the same order as on the other paths, so the same bits.
//
// Tiles are configured per call by the thread that computes (the shape depends on the rows of
// the chunk) and released when the call ends (AmxCall). Linux only: the process must ask the
// kernel for the tile state once (arch_prctl ARCH_REQ_XCOMP_PERM), done by cpu_has_amx_int8.

#pragma once

#include "x86_avx512.h"

#if EDGESPEC_X86 && defined(__linux__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#define EDGESPEC_HAS_AMX 1

namespace edgespec {
namespace blocks {

#define EDGESPEC_AMX EDGESPEC_AVX512 ",amx-tile,amx-int8"

// Tile loads and stores as assembly that tells the compiler memory is read or written (the
// compilers' _tile_loadd/_tile_stored do not, so stores into a scratch the tile then reads could
// be dropped, and the dots read before the tile is stored); t: a tile number, a literal.
#define EDGESPEC_TILE_LOAD(t, base, stride) asm volatile("tileloadd (%0,%1,1), %%tmm" #t ::"r"(base), "r"(static_cast<long>(stride)) : "memory")
#define EDGESPEC_TILE_STORE(t, base, stride) asm volatile("tilestored %%tmm" #t ", (%0,%1,1)" ::"r"(base), "r"(static_cast<long>(stride)) : "memory")

// ldtilecfg's 64-byte operand (palette 1: 8 tiles of up to 16 rows of 64 bytes)
struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// Whether this CPU runs AMX-INT8 and the kernel lets this process use its tile state
// (asked once; XCR0 must enable the tile state as well).
inline bool cpu_has_amx_int8() {
  static const bool ok = [] {
    if (!cpu_has_avx512_vnni()) return false;
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !((d >> 24) & 1) || !((d >> 25) & 1)) return false;  // AMX-TILE, AMX-INT8
    uint32_t lo, hi;
    asm volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    if ((lo & (3u << 17)) != (3u << 17)) return false;  // XTILECFG, XTILEDATA enabled by the OS
    constexpr long kReqXcompPerm = 0x1023, kXtiledata = 18;
    return syscall(SYS_arch_prctl, kReqXcompPerm, kXtiledata) == 0;
  }();
  return ok;
}

// One block_linear call's use of the tiles on one thread: configures them for the chunk's
// row count (when it changes) and releases them at the end of the call.
class AmxCall {
 public:
  AmxCall() = default;
  AmxCall(const AmxCall&) = delete;
  AmxCall& operator=(const AmxCall&) = delete;
  __attribute__((target(EDGESPEC_AMX))) ~AmxCall() {
    if (rows_ > 0) _tile_release();
  }

  // Tiles for m activation rows (1..16); split: S8F's halves (module comment)
  __attribute__((target(EDGESPEC_AMX))) void configure(int64_t m, bool split) {
    const int64_t key = split ? -m : m;
    if (rows_ > 0 && key == key_) return;
    TileConfig cfg;
    const uint8_t r = static_cast<uint8_t>(m);
    if (split) {  // 0/1 A halves (16 bytes), 2/3 B halves (4 rows), 4/5 C halves
      for (int t : {0, 1}) cfg.rows[t] = r, cfg.colsb[t] = 16;
      for (int t : {2, 3}) cfg.rows[t] = 4, cfg.colsb[t] = 64;
      for (int t : {4, 5}) cfg.rows[t] = r, cfg.colsb[t] = 64;
    } else {  // two sets (even and odd blocks): A (32 bytes), B (8 rows), C
      for (int t : {0, 3}) cfg.rows[t] = r, cfg.colsb[t] = 32;
      for (int t : {1, 4}) cfg.rows[t] = 8, cfg.colsb[t] = 64;
      for (int t : {2, 5}) cfg.rows[t] = r, cfg.colsb[t] = 64;
    }
    asm volatile("ldtilecfg %0" ::"m"(cfg) : "memory");  // the whole operand (_tile_loadconfig declares 8 bytes read)
    rows_ = m, key_ = key;
  }

  // The B-layout codes of the pair at w (G blocks): `fill(b)` writes them unless this call
  // already did for w (the chunks of a call's rows past the first 16 reuse them: prefill).
  template <typename Fill>
  uint8_t* pair_codes(const uint8_t* w, int64_t G, Fill fill) {
    b_.resize(G * 512 + 64);
    uint8_t* b = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(b_.data()) + 63) & ~uintptr_t{63});
    if (w != coded_) fill(b);
    coded_ = w;
    return b;
  }

  // Room for the dots of G blocks, `ints` int32 per block, 64-byte aligned
  int32_t* dots(int64_t G, int64_t ints) {
    dots_.resize(G * ints + 16);
    return reinterpret_cast<int32_t*>((reinterpret_cast<uintptr_t>(dots_.data()) + 63) & ~uintptr_t{63});
  }

 private:
  int64_t rows_ = 0, key_ = 0;
  const uint8_t* coded_ = nullptr;
  std::vector<uint8_t>& b_ = scratch<uint8_t>();
  std::vector<int32_t>& dots_ = scratch<int32_t>();

  template <typename T>
  static std::vector<T>& scratch() {  // this thread's, kept between calls (no allocation per call)
    static thread_local std::vector<T> v;
    return v;
  }
};

// The pair's codes of block g in AMX's B layout (module comment): row c (64 bytes) = group c of
// tile t0's 8 rows, then of t1's; 4-bit codes: rows 0..3 the low nibbles (elements 0..15), rows
// 4..7 the high ones (16..31), as GGUF pairs element j with j + 16.
template <int64_t F>
__attribute__((target(EDGESPEC_AMX))) inline void pair_codes_b(const uint8_t* t0, const uint8_t* t1, uint8_t* b) {
  if constexpr (is_s8(F)) {
    for (int c = 0; c < 8; ++c) _mm512_store_si512(b + 64 * c, cat256(t0 + 32 * c, t1 + 32 * c));
  } else {
    const __m512i low4 = _mm512_set1_epi8(0x0f);
    for (int c = 0; c < 4; ++c) {
      const __m512i v = cat256(t0 + 32 * c, t1 + 32 * c);
      _mm512_store_si512(b + 64 * c, _mm512_and_si512(v, low4));
      _mm512_store_si512(b + 64 * (4 + c), _mm512_and_si512(_mm512_srli_epi16(v, 4), low4));
    }
  }
}

// Tile products of block g into dots (row i's 16 dots at dots + 16 i; S8F: the second half's at
// dots + 256 + 16 i). Set: which tiles (0..2 or 3..5), so two blocks are in flight; tile numbers
// must be literals in the intrinsics.
template <int64_t F, int Set>
__attribute__((target(EDGESPEC_AMX))) inline void block_dots_amx(const int8_t* a, int64_t k, const uint8_t* b, int32_t* dots) {
  if constexpr (F == kS8F) {
    EDGESPEC_TILE_LOAD(0, a, k);
    EDGESPEC_TILE_LOAD(1, a + 16, k);
    EDGESPEC_TILE_LOAD(2, b, 64);
    EDGESPEC_TILE_LOAD(3, b + 256, 64);
    _tile_zero(4);
    _tile_zero(5);
    _tile_dpbssd(4, 0, 2);
    _tile_dpbssd(5, 1, 3);
    EDGESPEC_TILE_STORE(4, dots, 64);
    EDGESPEC_TILE_STORE(5, dots + 256, 64);
  } else if constexpr (Set == 0) {
    EDGESPEC_TILE_LOAD(0, a, k);
    EDGESPEC_TILE_LOAD(1, b, 64);
    _tile_zero(2);
    if constexpr (is_s8(F)) _tile_dpbssd(2, 0, 1);
    else _tile_dpbsud(2, 0, 1);  // signed activation, unsigned 4-bit codes
    EDGESPEC_TILE_STORE(2, dots, 64);
  } else {
    EDGESPEC_TILE_LOAD(3, a, k);
    EDGESPEC_TILE_LOAD(4, b, 64);
    _tile_zero(5);
    if constexpr (is_s8(F)) _tile_dpbssd(5, 3, 4);
    else _tile_dpbsud(5, 3, 4);
    EDGESPEC_TILE_STORE(5, dots, 64);
  }
}

// acc[i] += block g's terms for the M rows, from their dots: tile_pair_avx512's epilogue
template <int64_t F, int64_t M>
__attribute__((target(EDGESPEC_AMX))) inline void block_epilogue_amx(const uint8_t* t0, const uint8_t* t1, const QuantizedRows& x, int64_t g,
                                                                    const int32_t* dots, __m512* a) {
  constexpr int64_t cb = code_bytes(F), cb2 = second_scales(F);
  constexpr bool fp32 = fp32_scales(F);
  const __m512 d16 = scales16<fp32>(t0 + cb, t1 + cb);
#pragma GCC unroll 16
  for (int64_t i = 0; i < M; ++i) {
    const __m512 dx = _mm512_set1_ps(x.d[i * x.g + g]);
    const __m512 dot = _mm512_cvtepi32_ps(_mm512_load_si512(dots + 16 * i));
    __m512 tt;
    if constexpr (F == kS8F) {
      const __m512 dh16 = scales16<true>(t0 + cb2, t1 + cb2);
      tt = _mm512_add_ps(_mm512_mul_ps(_mm512_mul_ps(d16, dx), dot), _mm512_mul_ps(_mm512_mul_ps(dh16, dx), _mm512_cvtepi32_ps(_mm512_load_si512(dots + 256 + 16 * i))));
    } else {
      tt = _mm512_mul_ps(_mm512_mul_ps(d16, dx), dot);
      if constexpr (has_min(F)) tt = _mm512_add_ps(tt, _mm512_mul_ps(scales16<fp32>(t0 + cb2, t1 + cb2), _mm512_set1_ps(x.s[i * x.g + g])));
    }
    a[i] = _mm512_add_ps(a[i], tt);
  }
}

// A pair of tiles for M activation rows (1..16), as tile_pair_avx512: acc row i's 16 outputs at
// acc + 16 i. The tiles must be configured for M rows (AmxCall::configure). In three passes over
// the pair's blocks, so that no step waits on the one before it: every block's codes into the
// B layout (once per call), every block's tile products (two blocks in flight), every block's
// epilogue.
template <int64_t F, int64_t M>
__attribute__((target(EDGESPEC_AMX))) inline void tile_pair_amx(AmxCall& amx, const uint8_t* w, const QuantizedRows& x, float* acc) {
  constexpr int64_t tb = tile_bytes(F), dot_ints = (F == kS8F ? 2 : 1) * 256;
  const uint8_t* b = amx.pair_codes(w, x.g, [&](uint8_t* out) {
    for (int64_t g = 0; g < x.g; ++g) {
      const uint8_t* t0 = w + 2 * g * tb;
      for (int64_t off = 0; off < 2 * tb; off += 64) _mm_prefetch(reinterpret_cast<const char*>(t0 + 2 * x.prefetch * tb + off), _MM_HINT_T0);
      pair_codes_b<F>(t0, t0 + tb, out + 512 * g);
    }
  });
  int32_t* dots = amx.dots(x.g, dot_ints);
  constexpr int64_t step = F == kS8F ? 1 : 2;  // S8F's halves take the tiles of both sets
  for (int64_t g = 0; g < x.g; g += step) {
    block_dots_amx<F, 0>(x.q + g * kBlock, x.k, b + 512 * g, dots + dot_ints * g);
    if (step == 2 && g + 1 < x.g) block_dots_amx<F, 1>(x.q + (g + 1) * kBlock, x.k, b + 512 * (g + 1), dots + dot_ints * (g + 1));
  }
  __m512 a[M];
#pragma GCC unroll 16
  for (int64_t i = 0; i < M; ++i) a[i] = _mm512_loadu_ps(acc + 16 * i);
  for (int64_t g = 0; g < x.g; ++g) block_epilogue_amx<F, M>(w + 2 * g * tb, w + (2 * g + 1) * tb, x, g, dots + dot_ints * g, a);
#pragma GCC unroll 16
  for (int64_t i = 0; i < M; ++i) _mm512_storeu_ps(acc + 16 * i, a[i]);
}

// tile_pair_amx with the row count (1..kRowChunkWide) as its template argument, the tiles
// configured for it first
template <int64_t F>
inline void tile_pair_amx_rows(AmxCall& amx, const uint8_t* w, const QuantizedRows& x, int64_t m, float* acc) {
  amx.configure(m, F == kS8F);
  switch (m) {
    case 1: return tile_pair_amx<F, 1>(amx, w, x, acc);
    case 2: return tile_pair_amx<F, 2>(amx, w, x, acc);
    case 3: return tile_pair_amx<F, 3>(amx, w, x, acc);
    case 4: return tile_pair_amx<F, 4>(amx, w, x, acc);
    case 5: return tile_pair_amx<F, 5>(amx, w, x, acc);
    case 6: return tile_pair_amx<F, 6>(amx, w, x, acc);
    case 7: return tile_pair_amx<F, 7>(amx, w, x, acc);
    case 8: return tile_pair_amx<F, 8>(amx, w, x, acc);
    case 9: return tile_pair_amx<F, 9>(amx, w, x, acc);
    case 10: return tile_pair_amx<F, 10>(amx, w, x, acc);
    case 11: return tile_pair_amx<F, 11>(amx, w, x, acc);
    case 12: return tile_pair_amx<F, 12>(amx, w, x, acc);
    case 13: return tile_pair_amx<F, 13>(amx, w, x, acc);
    case 14: return tile_pair_amx<F, 14>(amx, w, x, acc);
    case 15: return tile_pair_amx<F, 15>(amx, w, x, acc);
    default: return tile_pair_amx<F, kRowChunkWide>(amx, w, x, acc);
  }
}

}  // namespace blocks
}  // namespace edgespec
#else
namespace edgespec {
namespace blocks {
inline bool cpu_has_amx_int8() { return false; }
}  // namespace blocks
}  // namespace edgespec
#endif
