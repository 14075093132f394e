#include "engine/text/string_transducer.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <queue>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace jasper {
namespace {

// One search node: a state reached after some input bytes, its best weight so far, and the node
// and arc it was reached by (-1 for the start).
struct Node {
  int32_t state;
  float weight;
  int32_t prev;
  int32_t arc;
};

}  // namespace

absl::StatusOr<std::unique_ptr<const StringTransducer>> StringTransducer::Compile(
    const fst::StdVectorFst& fst, absl::string_view what) {
  auto invalid = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", why));
  };
  const int64_t num_states = fst.NumStates();
  if (num_states >= std::numeric_limits<int32_t>::max()) return invalid("too many states");
  std::unique_ptr<StringTransducer> t(new StringTransducer());
  t->start_ = fst.Start() == fst::kNoStateId ? -1 : static_cast<int>(fst.Start());
  t->first_arc_.assign(num_states + 1, 0);
  t->first_byte_arc_.assign(num_states, 0);
  t->final_.assign(num_states, std::numeric_limits<float>::infinity());
  int64_t total_arcs = 0;
  for (int64_t s = 0; s < num_states; ++s) total_arcs += fst.NumArcs(s);
  if (total_arcs >= std::numeric_limits<int32_t>::max()) return invalid("too many arcs");
  t->arcs_.reserve(total_arcs);

  std::vector<int32_t> epsilon_in(num_states, 0);  // input-epsilon arcs into each state
  for (int64_t s = 0; s < num_states; ++s) {
    const float final_weight = fst.Final(s).Value();
    if (std::isnan(final_weight)) return invalid(absl::StrCat("state ", s, ": a NaN final weight"));
    t->final_[s] = final_weight;
    t->first_arc_[s] = static_cast<int32_t>(t->arcs_.size());
    int previous = 0;
    for (fst::ArcIterator<fst::StdVectorFst> it(fst, s); !it.Done(); it.Next()) {
      const fst::StdArc& a = it.Value();
      if (a.ilabel < 0 || a.ilabel > 255) {
        return invalid(
            absl::StrCat("state ", s, ": input label ", a.ilabel, " is not a byte or epsilon"));
      }
      if (a.ilabel < previous) return invalid("arcs are not sorted by input label");
      if (a.olabel < 0 || a.olabel > std::numeric_limits<int32_t>::max()) {
        return invalid(absl::StrCat("state ", s, ": output label ", a.olabel, " out of range"));
      }
      if (std::isnan(a.weight.Value())) return invalid(absl::StrCat("state ", s, ": a NaN weight"));
      previous = static_cast<int>(a.ilabel);
      if (a.ilabel == 0) ++epsilon_in[a.nextstate];
      t->arcs_.push_back({static_cast<int32_t>(a.ilabel), static_cast<int32_t>(a.olabel),
                          a.weight.Value(), static_cast<int32_t>(a.nextstate)});
    }
    int32_t b = t->first_arc_[s];
    while (b < static_cast<int32_t>(t->arcs_.size()) && t->arcs_[b].ilabel == 0) ++b;
    t->first_byte_arc_[s] = b;
  }
  t->first_arc_[num_states] = static_cast<int32_t>(t->arcs_.size());

  // Kahn's algorithm over the input-epsilon arcs: within one input position, states are relaxed
  // in this order, so every epsilon predecessor of a state is final before the state is used.
  t->epsilon_rank_.assign(num_states, 0);
  std::vector<int32_t> ready;
  for (int64_t s = 0; s < num_states; ++s) {
    if (epsilon_in[s] == 0) ready.push_back(static_cast<int32_t>(s));
  }
  int32_t ranked = 0;
  while (!ready.empty()) {
    const int32_t s = ready.back();
    ready.pop_back();
    t->epsilon_rank_[s] = ranked++;
    for (int32_t a = t->first_arc_[s]; a < t->first_byte_arc_[s]; ++a) {
      if (--epsilon_in[t->arcs_[a].next] == 0) ready.push_back(t->arcs_[a].next);
    }
  }
  if (ranked != num_states) return invalid("a cycle of input-epsilon arcs");
  return std::unique_ptr<const StringTransducer>(std::move(t));
}

bool StringTransducer::ShortestPath(absl::string_view input, std::vector<PathArc>* path,
                                    float* weight) const {
  path->clear();
  if (start_ < 0) return false;
  // Per-thread search memory, reused across calls (Thread-safety in the header): the nodes, and
  // for each state its node in the layer being built, valid where stamp == the layer's stamp.
  struct Scratch {
    std::vector<Node> nodes;
    std::vector<int32_t> slot;
    std::vector<uint32_t> stamp;
    uint32_t layer_stamp = 0;
  };
  thread_local Scratch scratch;
  std::vector<Node>& nodes = scratch.nodes;
  nodes.clear();
  // A long input's nodes are not kept past the call (the memory a thread keeps stays bounded).
  struct TrimOnReturn {
    std::vector<Node>& nodes;
    ~TrimOnReturn() {
      constexpr size_t kKeptNodes = size_t{1} << 16;  // 1 MiB
      if (nodes.capacity() > kKeptNodes) std::vector<Node>().swap(nodes);
    }
  } trim{nodes};
  if (scratch.slot.size() < final_.size()) {
    scratch.slot.resize(final_.size());
    scratch.stamp.assign(final_.size(), 0);
    scratch.layer_stamp = 0;
  }
  auto new_layer = [&] {
    if (++scratch.layer_stamp == 0) {  // wrapped: forget every stamp
      std::fill(scratch.stamp.begin(), scratch.stamp.end(), 0);
      scratch.layer_stamp = 1;
    }
  };
  new_layer();
  bool last_layer = input.empty();

  // Whether a node for `state` can still lead to success from the layer being built.
  auto useful = [&](int32_t state) {
    if (first_byte_arc_[state] != first_arc_[state]) return true;  // epsilon arcs go on
    return last_layer ? final_[state] != std::numeric_limits<float>::infinity()
                      : first_byte_arc_[state] != first_arc_[state + 1];  // reads on
  };
  auto relax = [&](int32_t state, float w, int32_t prev, int32_t arc) {
    if (scratch.stamp[state] != scratch.layer_stamp) {
      scratch.stamp[state] = scratch.layer_stamp;
      scratch.slot[state] = static_cast<int32_t>(nodes.size());
      nodes.push_back({state, w, prev, arc});
    } else if (Node& n = nodes[scratch.slot[state]]; w <= n.weight) {  // ties: the later one
      n = {state, w, prev, arc};
    }
  };
  // Input-epsilon arcs within the layer [begin, nodes.size()), in epsilon-topological order.
  using Ranked = std::pair<int32_t, int32_t>;  // (epsilon rank, node)
  auto close_epsilons = [&](size_t begin) {
    std::priority_queue<Ranked, std::vector<Ranked>, std::greater<Ranked>> heap;
    for (size_t n = begin; n < nodes.size(); ++n) {
      const int32_t s = nodes[n].state;
      if (first_byte_arc_[s] != first_arc_[s])
        heap.push({epsilon_rank_[s], static_cast<int32_t>(n)});
    }
    while (!heap.empty()) {
      const int32_t n = heap.top().second;
      heap.pop();
      const int32_t s = nodes[n].state;
      const float w = nodes[n].weight;
      for (int32_t a = first_arc_[s]; a < first_byte_arc_[s]; ++a) {
        const Arc& arc = arcs_[a];
        if (!useful(arc.next)) continue;
        const size_t before = nodes.size();
        relax(arc.next, w + arc.weight, n, a);
        if (nodes.size() != before && first_byte_arc_[arc.next] != first_arc_[arc.next]) {
          heap.push({epsilon_rank_[arc.next], static_cast<int32_t>(before)});
        }
      }
    }
  };

  relax(start_, 0.0f, -1, -1);
  close_epsilons(0);
  size_t layer = 0;
  for (size_t i = 0; i < input.size(); ++i) {
    const int32_t byte = static_cast<unsigned char>(input[i]);
    if (byte == 0) return false;
    last_layer = i + 1 == input.size();
    const size_t next = nodes.size();
    new_layer();
    for (size_t n = layer; n < next; ++n) {
      const int32_t s = nodes[n].state;
      const float w = nodes[n].weight;
      const Arc* begin = arcs_.data() + first_byte_arc_[s];
      const Arc* end = arcs_.data() + first_arc_[s + 1];
      const Arc* a = std::lower_bound(begin, end, byte,
                                      [](const Arc& x, int32_t label) { return x.ilabel < label; });
      for (; a != end && a->ilabel == byte; ++a) {
        if (!useful(a->next)) continue;
        relax(a->next, w + a->weight, static_cast<int32_t>(n),
              static_cast<int32_t>(a - arcs_.data()));
      }
    }
    if (nodes.size() == next) return false;
    layer = next;
    close_epsilons(layer);
  }

  int32_t best = -1;
  float best_weight = std::numeric_limits<float>::infinity();
  for (size_t n = layer; n < nodes.size(); ++n) {
    const float f = final_[nodes[n].state];
    if (f == std::numeric_limits<float>::infinity()) continue;
    const float total = nodes[n].weight + f;
    if (best < 0 || total <= best_weight) {
      best = static_cast<int32_t>(n);
      best_weight = total;
    }
  }
  if (best < 0) return false;
  for (int32_t n = best; nodes[n].prev >= 0; n = nodes[n].prev) {
    const Arc& arc = arcs_[nodes[n].arc];
    path->push_back({arc.ilabel, arc.olabel});
  }
  std::reverse(path->begin(), path->end());
  if (weight != nullptr) *weight = best_weight;
  return true;
}

}  // namespace jasper
