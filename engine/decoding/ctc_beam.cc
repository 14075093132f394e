#include "engine/decoding/ctc_beam.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"

namespace jasper {
namespace {

constexpr float kLn10 = 2.302585093f;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

float LogAdd(float a, float b) {
  if (a == kNegInf) return b;
  if (b == kNegInf) return a;
  const float hi = std::max(a, b);
  return hi + std::log1p(std::exp(std::min(a, b) - hi));
}

uint64_t ChildKey(int parent, int label) {
  return (static_cast<uint64_t>(parent) << 16) | static_cast<uint64_t>(label & 0xffff);
}

}  // namespace

absl::Status BeamOptions::Validate() const {
  const auto bad = [](absl::string_view field, absl::string_view range) {
    return absl::InvalidArgumentError(absl::StrCat(field, " must be in ", range));
  };
  if (beam_width < 1 || beam_width > 256) return bad("beam_width", "[1, 256]");
  if (!(lm_weight >= 0 && lm_weight <= 10)) return bad("lm_weight", "[0, 10]");
  if (!(word_bonus >= -20 && word_bonus <= 20)) return bad("word_bonus", "[-20, 20]");
  if (!(prune_log_prob > 0 && prune_log_prob <= 100)) return bad("prune_log_prob", "(0, 100]");
  if (!(beam_prune_log_prob > 0 && beam_prune_log_prob <= 1000)) {
    return bad("beam_prune_log_prob", "(0, 1000]");
  }
  if (!(oov_penalty >= -100 && oov_penalty <= 0)) return bad("oov_penalty", "[-100, 0]");
  if (max_nodes < 1024) return bad("max_nodes", "[1024, ...)");
  return absl::OkStatus();
}

CtcBeamDecoder::CtcBeamDecoder(const std::vector<std::string>* labels, int blank_id,
                               const BeamOptions& options, const NgramLm* lm,
                               const PhraseBoost* boost)
    : labels_(labels), blank_id_(blank_id), options_(options), lm_(lm), boost_(boost) {
  for (size_t i = 0; i < labels_->size(); ++i) {
    if ((*labels_)[i] == " ") space_id_ = static_cast<int>(i);
  }
  Reset();
}

void CtcBeamDecoder::Reset() {
  nodes_.clear();
  children_.clear();
  Node root;
  if (lm_ != nullptr) root.lm_state = lm_->BeginSentence();
  nodes_.push_back(root);
  hyps_.assign(1, Hyp{0, true, 0.0f});
  compact_at_ = static_cast<size_t>(options_.max_nodes);
}

float CtcBeamDecoder::WordScore(int node, NgramLm::State* state) const {
  const int start = nodes_[node].word_start;
  if (start < 0) return 0.0f;
  float score = lm_ != nullptr ? options_.word_bonus : 0.0f;  // the bonus balances the LM
  if (lm_ != nullptr) {
    const Node& n = nodes_[node];
    const int word = n.oov ? lm_->unk_id() : lm_->PrefixWord(n.lex);
    score += options_.lm_weight * kLn10 * lm_->Score(*state, word, state);
  }
  return score;
}

int CtcBeamDecoder::Child(int parent, int label, int frame, float log_prob) {
  const uint64_t key = ChildKey(parent, label);
  auto it = children_.find(key);
  if (it != children_.end()) {
    Node& n = nodes_[it->second];
    if (n.touched != frame) {
      Journal(it->second);
      if (n.last_live < frame - 1) {  // dropped from the beam earlier: its token starts now
        n.frame = frame;
        n.log_prob = log_prob;
      }
      n.touched = frame;
    }
    return it->second;
  }
  Node n;
  const Node& p = nodes_[parent];
  n.parent = parent;
  n.label = label;
  n.frame = frame;
  n.log_prob = log_prob;
  n.touched = frame;
  n.static_score = p.static_score;
  n.lm_state = p.lm_state;
  n.boost_state = p.boost_state;
  const int id = static_cast<int>(nodes_.size());
  if (label == space_id_) {
    n.static_score += WordScore(parent, &n.lm_state);  // the word before the space is complete
    n.word_start = -1;
  } else {
    n.word_start = p.word_start >= 0 ? p.word_start : id;
    n.oov = p.word_start >= 0 && p.oov;
    if (lm_ != nullptr && !n.oov) {
      // The open word's vocabulary range, narrowed by this label's bytes.
      n.lex = p.word_start >= 0 ? p.lex : lm_->RootPrefix();
      bool known = true;
      for (const char ch : (*labels_)[label]) known = known && lm_->ExtendPrefix(&n.lex, ch);
      if (!known) {
        n.oov = true;
        n.static_score += options_.oov_penalty;
      }
    }
  }
  if (boost_ != nullptr) n.static_score += boost_->Step(&n.boost_state, label);
  nodes_.push_back(n);
  children_.emplace(key, id);
  return id;
}

void CtcBeamDecoder::Step(const float* lp, int vocab, int frame, std::vector<Hyp>* hyps) {
  float best = kNegInf;
  for (int c = 0; c < vocab; ++c) best = std::max(best, lp[c]);
  const float floor = best - options_.prune_log_prob;
  // Per-frame scratch kept across frames (no allocation once warm).
  std::vector<Hyp>& next = next_scratch_;
  next.clear();
  if (++step_ == 0) {  // the stamps wrapped: clear them all once
    for (Node& n : nodes_) n.slot_step[0] = n.slot_step[1] = 0;
    step_ = 1;
  }
  const auto add = [&](int node, bool blank, float acoustic, bool stayed) {
    Node& n = nodes_[node];
    if (n.slot_step[blank] != step_) {
      n.slot_step[blank] = step_;
      n.slot[blank] = static_cast<int>(next.size());
      next.push_back(Hyp{node, blank, acoustic, 0.0f, stayed});
    } else {
      Hyp& h = next[n.slot[blank]];
      h.acoustic = LogAdd(h.acoustic, acoustic);
      h.stayed = h.stayed || stayed;
    }
  };
  for (const Hyp& h : *hyps) {
    if (blank_id_ >= 0 && blank_id_ < vocab) {
      add(h.node, true, h.acoustic + lp[blank_id_], false);
    }
    const int last = nodes_[h.node].label;
    if (last >= 0 && !h.blank) add(h.node, false, h.acoustic + lp[last], true);  // a repeat
    for (int c = 0; c < vocab; ++c) {
      if (c == blank_id_ || lp[c] < floor) continue;
      if (c == last && !h.blank) continue;  // that is the repeat above
      add(Child(h.node, c, frame, lp[c]), false, h.acoustic + lp[c], false);
    }
  }
  for (Hyp& h : next) h.score = h.acoustic + nodes_[h.node].static_score;
  const auto better = [](const Hyp& a, const Hyp& b) {
    if (a.score != b.score) return a.score > b.score;
    if (a.node != b.node) return a.node < b.node;  // deterministic ties
    return a.blank && !b.blank;
  };
  const size_t keep = std::min(next.size(), static_cast<size_t>(options_.beam_width));
  std::partial_sort(next.begin(), next.begin() + static_cast<std::ptrdiff_t>(keep), next.end(),
                    better);
  size_t kept = keep;
  if (kept > 0) {
    const float cut = next.front().score - options_.beam_prune_log_prob;
    while (kept > 1 && next[kept - 1].score < cut) --kept;
  }
  next.resize(kept);
  for (const Hyp& h : next) {
    Node& n = nodes_[h.node];
    // A kept hypothesis that stayed on the node's label (a repeat path merged in it): the
    // token's frames go on and its peak may rise.
    if (h.stayed && lp[n.label] > n.log_prob) {
      Journal(h.node);
      n.log_prob = lp[n.label];
    }
    // The node and its ancestors are live (their tokens are in use: Child() must not restart
    // them). Stops at the first one already marked this frame: a frame costs one path to the
    // root (the utterance's tokens) plus the beam's distinct suffixes.
    for (int a = h.node; a >= 0 && nodes_[a].last_live != frame; a = nodes_[a].parent) {
      Journal(a);
      nodes_[a].last_live = frame;
    }
  }
  hyps->swap(next);
}

void CtcBeamDecoder::Journal(int node) {
  if (journal_ == nullptr || static_cast<size_t>(node) >= journal_base_) return;
  const Node& n = nodes_[node];
  journal_->push_back(Saved{node, n.frame, n.last_live, n.touched, n.log_prob});
}

void CtcBeamDecoder::Feed(const float* log_probs, int frames, int vocab, int first_frame) {
  for (int t = 0; t < frames; ++t) {
    Step(log_probs + static_cast<size_t>(t) * vocab, vocab, first_frame + t, &hyps_);
    if (nodes_.size() > compact_at_) {
      Compact();
      // Live nodes may be many (a long utterance): compact again only once the arena doubled.
      compact_at_ = std::max(static_cast<size_t>(options_.max_nodes), 2 * nodes_.size());
    }
  }
}

std::vector<CtcToken> CtcBeamDecoder::Peek(const float* log_probs, int frames, int vocab,
                                           int first_frame) {
  // Runs on a copy of the hypotheses, then undoes every change to the arena: the look-ahead
  // frames will come again, decoded with more context, and must find the arena as it was.
  std::vector<Hyp> hyps = hyps_;
  std::vector<Saved> journal;
  journal_ = &journal;
  journal_base_ = nodes_.size();
  for (int t = 0; t < frames; ++t) {
    Step(log_probs + static_cast<size_t>(t) * vocab, vocab, first_frame + t, &hyps);
  }
  std::vector<CtcToken> best = hyps.empty() ? std::vector<CtcToken>() : Tokens(hyps.front().node);
  for (auto it = journal.rbegin(); it != journal.rend(); ++it) {
    Node& n = nodes_[it->node];
    n.frame = it->frame;
    n.last_live = it->last_live;
    n.touched = it->touched;
    n.log_prob = it->log_prob;
  }
  for (size_t i = journal_base_; i < nodes_.size(); ++i) {
    children_.erase(ChildKey(nodes_[i].parent, nodes_[i].label));
  }
  nodes_.resize(journal_base_);
  journal_ = nullptr;
  return best;
}

std::vector<CtcToken> CtcBeamDecoder::Tokens(int node) const {
  std::vector<CtcToken> tokens;
  for (int n = node; n > 0; n = nodes_[n].parent) {
    tokens.push_back(CtcToken{nodes_[n].label, nodes_[n].frame, nodes_[n].log_prob});
  }
  std::reverse(tokens.begin(), tokens.end());
  return tokens;
}

std::vector<CtcToken> CtcBeamDecoder::Best() const {
  return hyps_.empty() ? std::vector<CtcToken>() : Tokens(hyps_.front().node);
}

float CtcBeamDecoder::FinalScore(const Hyp& h) const {
  const Node& n = nodes_[h.node];
  float score = h.acoustic + n.static_score;
  NgramLm::State state = n.lm_state;
  if (n.label >= 0 && n.label != space_id_) score += WordScore(h.node, &state);  // open word
  if (lm_ != nullptr)
    score += options_.lm_weight * kLn10 * lm_->Score(state, lm_->eos_id(), nullptr);
  if (boost_ != nullptr) score -= boost_->Pending(n.boost_state);
  return score;
}

std::vector<CtcToken> CtcBeamDecoder::Finish() const {
  const Hyp* best = nullptr;
  float best_score = kNegInf;
  for (const Hyp& h : hyps_) {
    const float s = FinalScore(h);
    if (best == nullptr || s > best_score) {
      best = &h;
      best_score = s;
    }
  }
  return best == nullptr ? std::vector<CtcToken>() : Tokens(best->node);
}

std::vector<std::vector<CtcToken>> CtcBeamDecoder::FinishNBest(int n) const {
  // One entry per prefix node: its hypotheses' final scores, log-added; and Finish()'s node.
  std::vector<std::pair<float, int>> scored;  // (score, node)
  scored.reserve(hyps_.size());
  int first = -1;
  float first_score = kNegInf;
  for (const Hyp& h : hyps_) {
    const float s = FinalScore(h);
    if (first < 0 || s > first_score) {
      first = h.node;
      first_score = s;
    }
    auto same = std::find_if(scored.begin(), scored.end(),
                             [&h](const std::pair<float, int>& e) { return e.second == h.node; });
    if (same == scored.end()) {
      scored.emplace_back(s, h.node);
    } else {
      same->first = LogAdd(same->first, s);
    }
  }
  std::vector<std::vector<CtcToken>> out;
  if (first < 0 || n < 1) return out;
  out.push_back(Tokens(first));
  std::stable_sort(scored.begin(), scored.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  for (const auto& [score, node] : scored) {
    if (static_cast<int>(out.size()) >= n) break;
    if (node != first) out.push_back(Tokens(node));
  }
  return out;
}

void CtcBeamDecoder::Compact() {
  // Keep the nodes some hypothesis reaches (and their ancestors); renumber in order, so that
  // parents stay before children.
  std::vector<int> remap(nodes_.size(), -1);
  for (const Hyp& h : hyps_) {
    for (int n = h.node; n >= 0 && remap[n] < 0; n = nodes_[n].parent) remap[n] = 0;
  }
  std::vector<Node> kept;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (remap[i] < 0) continue;
    remap[i] = static_cast<int>(kept.size());
    kept.push_back(nodes_[i]);
  }
  children_.clear();
  for (size_t i = 0; i < kept.size(); ++i) {
    Node& n = kept[i];
    if (n.parent >= 0) {
      n.parent = remap[n.parent];
      children_.emplace(ChildKey(n.parent, n.label), static_cast<int>(i));
    }
    if (n.word_start >= 0) n.word_start = remap[n.word_start];
  }
  nodes_.swap(kept);
  for (Hyp& h : hyps_) h.node = remap[h.node];
}

}  // namespace jasper
