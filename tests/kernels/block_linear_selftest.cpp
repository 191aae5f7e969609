// Self-test of block_linear.h with no ExecuTorch: on random tiles of every format, every SIMD
// path this CPU runs gives the portable path's bits, and a row's result does not depend
// on how many rows the call carries (M = 1..16, and 70 for the prefill chunks) or on how the
// tile rows are split among threads; and the head screen (block_linear/screen.h) gives the
// portable screen's intervals on every path. Built and run by tests/test_block_linear.py,
// natively and cross-compiled for aarch64 under qemu. Prints the formats tested (their tile
// bytes, by Format id from 1) and the paths tested, the one dispatched to first; exit 1 on a
// mismatch (the screen's said on stderr).

#include <cmath>
#include <cstdio>
#include <limits>
#include <cstring>
#include <random>
#include <vector>

#include "block_linear.h"
#include "block_linear/screen.h"

namespace B = edgespec::blocks;

namespace {

uint16_t float_to_half(float f) {  // inputs are normal fp16 values by construction
  uint32_t b;
  std::memcpy(&b, &f, 4);
  const uint32_t sign = (b >> 16) & 0x8000u;
  const int32_t exp = static_cast<int32_t>((b >> 23) & 0xff) - 127 + 15;
  return static_cast<uint16_t>(sign | (static_cast<uint32_t>(exp) << 10) | ((b >> 13) & 0x3ffu));
}

std::vector<uint8_t> random_tiles(int64_t format, int64_t nt, int64_t g, std::mt19937& rng) {
  const int64_t tb = B::tile_bytes(format);
  std::vector<uint8_t> w(nt * g * tb);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> mag(0.5f, 2.f);
  std::uniform_int_distribution<int> e(-12, -2);
  for (int64_t t = 0; t < nt * g; ++t) {
    uint8_t* p = w.data() + t * tb;
    const int64_t cb = B::code_bytes(format);
    for (int64_t j = 0; j < cb; ++j) p[j] = static_cast<uint8_t>(byte(rng));
    for (int r = 0; r < 8; ++r) {
      const float dv = std::ldexp(mag(rng), e(rng)), mv = -std::ldexp(mag(rng), e(rng) + 3);
      if (B::fp32_scales(format)) {
        const float dd = dv * 1.0001f;  // not an fp16 value
        const float mm = format == B::kS8F ? dv * 0.37f : mv;  // S8F: the second half's scale
        std::memcpy(p + cb + 4 * r, &dd, 4);
        std::memcpy(p + cb + 32 + 4 * r, &mm, 4);
      } else {
        const uint16_t hd = float_to_half(dv), hm = float_to_half(mv);
        std::memcpy(p + cb + 2 * r, &hd, 2);
        if (format == B::kU4H) std::memcpy(p + cb + 16 + 2 * r, &hm, 2);
      }
    }
  }
  return w;
}

// out [m, n] for rows x [m, k] through `path`, the tile rows split at `split`
std::vector<float> run(B::Path path, int64_t format, const std::vector<uint8_t>& w, const float* x, int64_t m, int64_t k, int64_t n, int64_t split) {
  const int64_t g = k / B::kBlock, nt = B::tile_rows(n);
  std::vector<int8_t> q(m * k);
  std::vector<float> d(m * g), s(m * g), out(m * n, -1.f);
  B::quantize_rows(x, m, k, q.data(), d.data(), s.data());
  const B::QuantizedRows rows{q.data(), d.data(), s.data(), k, g};
  B::linear_tile_rows(path, format, w.data(), rows, m, n, 0, split, out.data());
  B::linear_tile_rows(path, format, w.data(), rows, m, n, split, nt, out.data());
  return out;
}

// Screens of random bytes (finite normal scales) for rows of random codes: every path's
// intervals are the portable screen's bits. Returns the mismatches, each said on stderr.
int screen_mismatches(const std::vector<B::Path>& paths, std::mt19937& rng) {
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> mag(0.5f, 2.f);
  std::uniform_int_distribution<int> e(-12, -2);
  int failures = 0;
  for (int64_t k : {32, 192, 576}) {
    for (int64_t n : {16, 40, 203}) {
      const int64_t G = k / B::kBlock, pairs = (n + B::kPairRows - 1) / B::kPairRows;
      std::vector<uint8_t> screen(pairs * G * B::kScreenPairBytes);
      for (int64_t pb = 0; pb < pairs * G; ++pb) {
        uint8_t* p = screen.data() + pb * B::kScreenPairBytes;
        for (int64_t j = 0; j < B::kScreenScales; ++j) p[j] = static_cast<uint8_t>(byte(rng));
        for (int r = 0; r < 16; ++r) {
          const uint16_t h = float_to_half(std::ldexp(byte(rng) % 2 ? mag(rng) : -mag(rng), e(rng)));
          std::memcpy(p + B::kScreenScales + 2 * r, &h, 2);
        }
      }
      std::vector<int8_t> q(k);
      std::vector<float> d(G), a(G);
      std::vector<int32_t> c(G);
      for (auto& v : q) v = static_cast<int8_t>(byte(rng) - 128);
      for (auto& v : d) v = std::ldexp(mag(rng), e(rng));
      B::screen_row_sums(q.data(), d.data(), G, c.data(), a.data());
      const B::ScreenRow row{q.data(), d.data(), c.data(), a.data(), G};
      std::vector<float> hi0(n), lo0(n), hi(n), lo(n);
      B::screen_pairs(B::Path::kPortable, screen.data(), row, n, 0, pairs, hi0.data(), lo0.data());
      for (B::Path path : paths) {
        std::fill(hi.begin(), hi.end(), -1.f), std::fill(lo.begin(), lo.end(), -1.f);
        B::screen_pairs(path, screen.data(), row, n, 0, pairs, hi.data(), lo.data());
        if (std::memcmp(hi.data(), hi0.data(), n * sizeof(float)) != 0 || std::memcmp(lo.data(), lo0.data(), n * sizeof(float)) != 0) {
          std::fprintf(stderr, "MISMATCH screen k=%lld n=%lld path=%s\n", static_cast<long long>(k), static_cast<long long>(n), B::path_name(path));
          ++failures;
        }
      }
    }
  }
  return failures;
}

}  // namespace

int main() {
  std::mt19937 rng(1234);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<B::Path> paths{B::best_path()};
  for (B::Path p : {B::Path::kAvx512Vnni, B::Path::kAmxInt8, B::Path::kAvxVnni, B::Path::kAvx2, B::Path::kI8mm, B::Path::kDotprod, B::Path::kPortable})
    if (p != paths[0] && B::path_supported(p)) paths.push_back(p);
  int failures = 0;
  std::vector<int64_t> formats;
  for (int64_t f = 1; B::tile_bytes(f) > 0; ++f) formats.push_back(f);  // every Format
  for (int64_t format : formats) {
    for (int64_t k : {32, 96, 576}) {
      const int64_t n = 45, nt = B::tile_rows(n);  // a padded last pair (tile rows 0..5: split at 3, inside a pair)
      const auto w = random_tiles(format, nt, k / B::kBlock, rng);
      const int64_t max_m = 70;
      std::vector<float> x(max_m * k);
      for (auto& v : x) v = normal(rng) * (rng() % 5 == 0 ? 8.f : 1.f);
      for (int j = 0; j < 16; ++j) x[j] = 0.f;  // an all-zero half block (d = 0)
      const std::vector<float> alone = [&] {
        std::vector<float> a(max_m * n);
        for (int64_t i = 0; i < max_m; ++i) {
          const auto r = run(B::Path::kPortable, format, w, x.data() + i * k, 1, k, n, nt);
          std::memcpy(a.data() + i * n, r.data(), n * sizeof(float));
        }
        return a;
      }();
      for (int64_t m : {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 70}) {
        for (B::Path path : paths) {
          const auto got = run(path, format, w, x.data(), m, k, n, nt / 2);
          if (std::memcmp(got.data(), alone.data(), m * n * sizeof(float)) != 0) {
            std::printf("MISMATCH format=%lld k=%lld m=%lld path=%s\n", static_cast<long long>(format), static_cast<long long>(k),
                        static_cast<long long>(m), B::path_name(path));
            ++failures;
          }
        }
      }
    }
  }
  // Edge cases, every path: a tile wholly past n in a range of its own (n = 33: tile rows 0..5,
  // rows 40..47 of tile 5 are padding); a block holding a NaN or an infinity makes its row's
  // outputs NaN; a block whose amax is so small that 1 / d overflows quantizes to zero codes
  // (the row equals the row with that block zeroed).
  for (int64_t format : formats) {
    const int64_t k = 96, n = 33, nt = B::tile_rows(n), m = 4;
    const auto w = random_tiles(format, nt, k / B::kBlock, rng);
    std::vector<float> x(m * k), zeroed;
    for (auto& v : x) v = normal(rng);
    x[0 * k + 5] = std::numeric_limits<float>::quiet_NaN();
    x[1 * k + 40] = -std::numeric_limits<float>::infinity();
    for (int j = 0; j < 32; ++j) x[2 * k + 64 + j] = j % 3 == 0 ? 0.f : 1e-38f * static_cast<float>(j);
    zeroed = x;
    for (int j = 0; j < 32; ++j) zeroed[2 * k + 64 + j] = 0.f;
    for (B::Path path : paths) {
      const auto got = run(path, format, w, x.data(), m, k, n, 5);
      const auto ref = run(B::Path::kPortable, format, w, zeroed.data(), m, k, n, nt);
      bool ok = true;
      for (int64_t j = 0; j < n; ++j) ok = ok && std::isnan(got[j]) && std::isnan(got[n + j]);
      ok = ok && std::memcmp(got.data() + 2 * n, ref.data() + 2 * n, 2 * n * sizeof(float)) == 0;
      if (!ok) {
        std::printf("MISMATCH edge cases format=%lld path=%s\n", static_cast<long long>(format), B::path_name(path));
        ++failures;
      }
    }
  }
  failures += screen_mismatches(paths, rng);
  std::printf("%s formats=", failures ? "FAILED" : "ok");
  for (int64_t f : formats) std::printf("%s%lld", f > 1 ? "," : "", static_cast<long long>(B::tile_bytes(f)));
  for (B::Path p : paths) std::printf(" %s", B::path_name(p));
  std::printf("\n");
  return failures ? 1 : 0;
}
