// Shared pieces of the op tests: a backend wrapper that uploads, poisons and downloads, random
// inputs, the error measure, and tree streams built independently of the engine (so that the
// references can walk root-to-node paths on their own).
//
// Every op test compares the backend, in f32 and f64, against a straightforward float64 loop
// written here in the tests (never calling the backend). Inputs are floats (upload takes float),
// so both sides see exactly the same values; outputs the op overwrites are pre-filled with NaN.
// Inputs are fresh every run: seeds mix a per-run seed (printed; FLIDE_TEST_SEED=N replays it)
// with each case's own salt.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>
#include <memory>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "backend/ops.h"
#include "backend/stream.h"

namespace flide::test {

using Vec = std::vector<double>;

inline uint32_t run_seed() {
  static const uint32_t seed = [] {
    const char* env = std::getenv("FLIDE_TEST_SEED");
    const uint32_t s = env ? uint32_t(std::strtoul(env, nullptr, 10)) : std::random_device{}();
    std::printf("op test inputs: FLIDE_TEST_SEED=%u\n", s);
    return s;
  }();
  return seed;
}

// The seed of one case: fresh per run, distinct per salt.
inline uint32_t fresh_seed(uint32_t salt) {
  return run_seed() ^ (salt * 2654435761u);
}

// Tolerances, relative in the sense of rel_err below.
// f64: backend and reference evaluate the same formulas in double; only summation order,
//      BLAS blocking and libm rounding differ, a few ulps (2e-16) amplified by at most a few
//      hundred terms: 1e-12 is far above that and far below any formula mistake.
// f32: float rounding (6e-8 per operation) accumulated over reductions of up to a few hundred
//      terms (sqrt(n) growth typical) lands around 1e-6; 1e-5 leaves a margin. Ops that carry
//      extra amplification (RoPE angles, the delta-rule recurrence) say why they use more.
constexpr double kTolF64 = 1e-12;
constexpr double kTolF32 = 1e-5;
inline double tol(DType d, double f32_tol = kTolF32) {
  return d == DType::DType_f64 ? kTolF64 : f32_tol;
}

inline std::string dtype_label(DType d) {
  return d == DType::DType_f64 ? "f64" : "f32";
}

// max_i |got_i - ref_i| / (|ref_i| + rms(ref)): relative for large entries, relative to the
// tensor's typical magnitude for entries near zero (where cancellation makes pure relative error
// meaningless). Any NaN in `got` gives infinity.
inline double rel_err(const Vec& got, const Vec& ref) {
  EXPECT_EQ(got.size(), ref.size());
  if (got.size() != ref.size()) return std::numeric_limits<double>::infinity();
  double sum_sq = 0;
  for (double r : ref) sum_sq += r * r;
  const double rms = ref.empty() ? 0.0 : std::sqrt(sum_sq / double(ref.size()));
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(got[i])) return std::numeric_limits<double>::infinity();
    const double denom = std::abs(ref[i]) + rms;
    const double err = std::abs(got[i] - ref[i]);
    worst = std::max(worst, denom > 0 ? err / denom : err);
  }
  return worst;
}

// The worst error seen per op and dtype, printed at the end of the run (tolerances in use).
class ErrorReport : public ::testing::Environment {
 public:
  static std::map<std::string, std::pair<double, double>>& worst() {  // label -> (err, tol)
    static std::map<std::string, std::pair<double, double>> table;
    return table;
  }
  void TearDown() override {
    std::printf("worst error (rel_err) per op and dtype relative to its tolerance:\n");
    for (const auto& [label, e] : worst())
      std::printf("  %-34s %.3g  (tol %.0e)\n", label.c_str(), e.first, e.second);
  }
};
inline ::testing::Environment* const kErrorReport =
    ::testing::AddGlobalTestEnvironment(new ErrorReport);

inline void expect_close(const std::string& op, DType dtype, const Vec& got, const Vec& ref,
                         double tolerance, const std::string& context = "") {
  const double err = rel_err(got, ref);
  EXPECT_LE(err, tolerance) << op << " " << context;
  auto [it, fresh] =
      ErrorReport::worst().try_emplace(op + " " + dtype_label(dtype), err, tolerance);
  if (!fresh && err / tolerance > it->second.first / it->second.second)
    it->second = {err, tolerance};
}

// Uniform floats in [lo, hi); the tests use ranges that straddle zero unless an op needs a sign.
inline std::vector<float> random_floats(std::mt19937& rng, int64_t n, double lo, double hi) {
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<float> out(size_t(std::max<int64_t>(n, 0)));
  for (float& x : out) x = float(dist(rng));
  return out;
}

inline Vec widen(const std::vector<float>& v) {
  return Vec(v.begin(), v.end());
}

// A backend and helpers to move test data through it.
class Device {
 public:
  explicit Device(DType dtype) : ops_(make_cpu_ops(dtype, 2)) {}
  Ops& ops() { return *ops_; }

  View put(int64_t rows, int64_t cols, const std::vector<float>& host) {
    EXPECT_EQ(int64_t(host.size()), rows * cols);
    View v = ops_->alloc(rows, cols);
    ops_->upload(v, host.data());
    return v;
  }
  // An output buffer filled with NaN, so that any element the op fails to write shows up.
  View poison(int64_t rows, int64_t cols) {
    return put(rows, cols,
               std::vector<float>(size_t(rows * cols), std::numeric_limits<float>::quiet_NaN()));
  }
  Vec get(View v) {
    Vec out(size_t(v.size()));
    ops_->download(v, out.data());
    return out;
  }

 private:
  std::unique_ptr<Ops> ops_;
};

// ---- tree streams ----

struct NodeSpec {
  int parent = -1;  // index of an earlier spec entry; -1 for a root
  int length = 1;
  int slot_in = -1;   // roots only: an initial-state slot the test fills (< n_initial_slots)
  int slot_out = -2;  // -2: a fresh slot when the node has children, none otherwise
  int position = 0;   // roots only: position of the first token
};

// Orders the spec by level (stable), as the engine does, and fills every Stream field the ops
// read. Fresh slots are numbered after the n_initial_slots the test owns. Children read their
// parent's slot_out. Token ids are random in [0, vocab).
inline Stream build_stream(const std::vector<NodeSpec>& spec, int n_initial_slots,
                           std::mt19937& rng, int vocab = 1) {
  const int n = int(spec.size());
  std::vector<int> level(n, 0), n_children(n, 0), position(n, 0);
  for (int i = 0; i < n; ++i) {
    if (spec[i].parent >= 0) {
      level[i] = level[spec[i].parent] + 1;
      position[i] = position[spec[i].parent] + spec[spec[i].parent].length;
      ++n_children[spec[i].parent];
    } else {
      position[i] = spec[i].position;
    }
  }
  std::vector<int> order(n);
  for (int i = 0; i < n; ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return level[a] < level[b]; });
  std::vector<int> index(n);
  for (int i = 0; i < n; ++i) index[order[i]] = i;

  Stream s;
  s.n_slots = n_initial_slots;
  std::uniform_int_distribution<int> id(0, vocab - 1);
  s.nodes.resize(size_t(n));
  int32_t offset = 0;
  for (int i = 0; i < n; ++i) {
    const NodeSpec& in = spec[order[i]];
    StreamNode& node = s.nodes[i];
    node.parent = in.parent < 0 ? -1 : index[in.parent];
    node.offset = offset;
    node.length = in.length;
    node.level = level[order[i]];
    node.slot_in = in.parent < 0 ? in.slot_in : s.nodes[node.parent].slot_out;
    node.slot_out = in.slot_out != -2 ? in.slot_out : n_children[order[i]] > 0 ? s.n_slots++ : -1;
    while (int(s.level_begin.size()) <= node.level) s.level_begin.push_back(i);
    for (int t = 0; t < in.length; ++t) {
      s.token_ids.push_back(id(rng));
      s.positions.push_back(position[order[i]] + t);
      s.token_node.push_back(i);
    }
    offset += in.length;
  }
  s.level_begin.push_back(n);
  return s;
}

// Stream rows of the root-to-node path of `node`, root first (ancestors whole, then the node).
inline std::vector<int32_t> path_rows(const Stream& s, int node) {
  std::vector<int> chain;
  for (int a = node; a >= 0; a = s.nodes[a].parent) chain.push_back(a);
  std::vector<int32_t> rows;
  for (auto it = chain.rbegin(); it != chain.rend(); ++it)
    for (int32_t t = 0; t < s.nodes[*it].length; ++t) rows.push_back(s.nodes[*it].offset + t);
  return rows;
}

// The root node of `node`'s path.
inline int root_of(const Stream& s, int node) {
  while (s.nodes[node].parent >= 0) node = s.nodes[node].parent;
  return node;
}

// Rows [r, r + 1) of a [rows, cols] host matrix gathered for the given row list.
inline Vec gather(const Vec& m, int64_t cols, const std::vector<int32_t>& rows) {
  Vec out;
  out.reserve(rows.size() * size_t(cols));
  for (int32_t r : rows) out.insert(out.end(), m.begin() + r * cols, m.begin() + (r + 1) * cols);
  return out;
}

// Unique random stream rows (sorted), always including each node's last row.
inline std::vector<int32_t> pick_out_rows(const Stream& s, std::mt19937& rng, double p_extra) {
  std::vector<int32_t> rows;
  std::bernoulli_distribution extra(p_extra);
  for (int32_t t = 0; t < s.n_tokens(); ++t) {
    const StreamNode& node = s.nodes[s.token_node[t]];
    if (t == node.offset + node.length - 1 || extra(rng)) rows.push_back(t);
  }
  std::shuffle(rows.begin(), rows.end(), rng);  // out rows need not be in stream order
  return rows;
}

// A few tree shapes shared by the attention, conv and delta-rule tests: 1-3 roots, children,
// grandchildren, lengths around the 64-row chunk (1, 63, 64, 65, 130, 200).
struct TreeCase {
  std::string name;
  std::vector<NodeSpec> nodes;
  int n_initial_slots = 0;  // roots with slot_in >= 0 start from a state the test uploads
};

inline void PrintTo(const TreeCase& tree, std::ostream* os) {
  *os << tree.name;
}

inline std::vector<TreeCase> tree_cases() {
  auto node = [](int parent, int length, int slot_in = -1, int slot_out = -2, int position = 0) {
    return NodeSpec{parent, length, slot_in, slot_out, position};
  };
  return {
      {"single_token", {node(-1, 1)}, 0},
      {"one_root_200", {node(-1, 200, -1, -2, 7)}, 0},
      {"root_children_grandchildren",
       {node(-1, 130), node(0, 1), node(0, 65), node(0, 64), node(2, 63), node(2, 2), node(3, 1)},
       0},
      {"three_roots",
       {node(-1, 1, -1, -2, 300), node(-1, 64), node(-1, 5), node(0, 3), node(0, 1), node(1, 200),
        node(2, 1), node(6, 130), node(7, 1)},
       0},
      {"initial_states",
       {node(-1, 63, 0), node(-1, 2, 1), node(0, 65), node(0, 1), node(1, 3), node(4, 64)},
       2},
      // Decode-like continuation: each root reads and writes the same slot in place.
      {"in_place_slots", {node(-1, 1, 0, 0), node(-1, 2, 1, 1), node(-1, 5, 2, 2)}, 3},
  };
}

}  // namespace flide::test
