// CtcBeamDecoder: CTC prefix beam search over per-frame log-probabilities, character-level and
// lexicon-free, with an optional word n-gram LM applied at word boundaries (the space label),
// a word-insertion bonus and optional phrase boosting. Frames are fed in order, in any number
// of calls (streaming: the state carries across windows); Best() reads the best hypothesis at
// any time (interim text), Finish() adds the end-of-sentence scores.
//
// Hypotheses are (prefix, whether the last frame was blank); paths reaching the same hypothesis
// are merged with log-sum-exp. With beam_width 1 the single kept hypothesis is the argmax
// path, so the tokens equal GreedyCtcDecoder's exactly (ids, frames, log-probs). A token's
// log_prob is the peak log-probability of its label over the frames a kept hypothesis stays on
// it (CtcToken; a prefix opened early at a low probability still gets its spike's). A prefix
// that is an ancestor of a kept hypothesis keeps its tokens' frames and log-probs (before issue
// 28 a path re-entering such a prefix restarted them, out of order with its descendants').
// Scores:
//   acoustic (natural log) + lm_weight * ln P_LM(words) + word_bonus * words + boost
// (the word bonus applies with an LM only: it balances the LM's per-word cost).
// Candidate characters per frame: those within prune_log_prob of the frame's best; hypotheses
// kept: at most beam_width, within beam_prune_log_prob of the best.
//
// Memory: prefixes live in an arena of nodes (parent, label, frame); nodes no hypothesis reaches
// are dropped when the arena passes max_nodes, so a stream's memory stays bounded by
// beam_width x the utterance's length in tokens (Reset() at each utterance end).
//
// Ownership: borrows the LM and the boost (both may be null; they must outlive the decoder).
// Thread-safety: not thread-safe (a per-stream value).
#ifndef JASPER_ENGINE_DECODING_CTC_BEAM_H_
#define JASPER_ENGINE_DECODING_CTC_BEAM_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "engine/decoding/ctc.h"
#include "engine/decoding/ngram_lm.h"
#include "engine/decoding/phrase_boost.h"

namespace jasper {

struct BeamOptions {
  int beam_width = 16;           // [1, 256]
  float lm_weight = 0.5f;        // [0, 10]; multiplies the LM's natural-log probability
  float word_bonus = 1.0f;       // [-20, 20]; per completed word
  float prune_log_prob = 10.0f;  // (0, 100]; characters this far below the frame's best drop
  // (0, 1000]; hypotheses scoring this far below the frame's best hypothesis drop (besides the
  // beam_width cap): in peaky CTC output most of the beam is far behind after a blank frame.
  float beam_prune_log_prob = 10.0f;
  // With an LM: added once to a hypothesis whose current word stops being a prefix of any LM
  // word (an out-of-vocabulary spelling), so OOV letters cannot run words together to save
  // word-boundary LM costs. Natural-log units (pyctcdecode's unk_score_offset). [-100, 0]
  float oov_penalty = -10.0f;
  // Prefix arena size that triggers a compaction (each node about 100 bytes with its child
  // index entry): the per-stream memory bound below a long utterance's live prefixes.
  int max_nodes = 1 << 13;

  // INVALID_ARGUMENT naming the field.
  absl::Status Validate() const;
};

class CtcBeamDecoder {
 public:
  // `labels` and `blank_id` as in ModelConfig (labels[i] is one character; " " separates
  // words). lm and boost may be null.
  CtcBeamDecoder(const std::vector<std::string>* labels, int blank_id, const BeamOptions& options,
                 const NgramLm* lm, const PhraseBoost* boost);

  // Consumes `frames` frames of log-probabilities ([frames, vocab] row-major, natural log, as
  // the backend's log-softmax gives them), the first being global frame `first_frame`.
  void Feed(const float* log_probs, int frames, int vocab, int first_frame);
  // The tokens of the best hypothesis so far (without end-of-sentence scores).
  std::vector<CtcToken> Best() const;
  // The best hypothesis if `frames` more frames followed, without keeping them (interim text
  // from the look-ahead). The hypotheses are unchanged; the arena may grow.
  std::vector<CtcToken> Peek(const float* log_probs, int frames, int vocab, int first_frame);
  // The best hypothesis after adding the last word's LM score, </s> and taking back unfinished
  // boosts: the final result of the utterance.
  std::vector<CtcToken> Finish() const;
  // Up to `n` hypotheses with distinct token sequences: Finish()'s first, then the other
  // prefixes of the beam by their final score (Finish()'s scoring; a prefix kept twice, ending
  // in a blank and in its label, counts once with the two probabilities added). Empty when
  // n < 1 or there is no hypothesis.
  std::vector<std::vector<CtcToken>> FinishNBest(int n) const;
  // Forgets everything (a new utterance).
  void Reset();

  int num_hypotheses() const { return static_cast<int>(hyps_.size()); }
  size_t arena_size() const { return nodes_.size(); }

 private:
  struct Node {
    int parent = -1;
    int label = -1;  // the token this node appends; -1 for the root
    int frame = 0;
    float log_prob = 0;      // the token's peak log-prob on kept hypotheses (confidences)
    float static_score = 0;  // LM, bonus and boost of the prefix up to here
    NgramLm::State lm_state;
    int boost_state = PhraseBoost::kRoot;
    int word_start = -1;  // node of the current word's first character (-1: none open)
    bool oov = false;     // the open word has left the LM's vocabulary (penalty applied)
    NgramLm::Prefix lex;  // with an LM and !oov: the vocabulary words the open word begins
    // A prefix is one node whatever frame its last token came in; frame is that of the path
    // that (re)entered the beam, log_prob starts there and rises while a kept hypothesis stays
    // on the label (a repeat): a node dropped from the beam (no kept hypothesis ends at it or
    // below it) and reached again later starts its token (frame and log_prob) at the new frame.
    // Paths that reach the prefix at other frames share the node: its peak may come from any
    // of them (they are merged, as their probabilities are).
    int last_live = -1;  // the last frame at which a kept hypothesis ended here or below
    int touched = -1;    // the last frame at which Child() returned it
    // Step()'s merge table, kept in the node (no hashing): where the (node, blank) hypothesis
    // of step `slot_step[blank]` sits in that step's list. Stale stamps never match.
    uint32_t slot_step[2] = {0, 0};
    int slot[2] = {0, 0};
  };
  // Peek's undo log: a node's fields before Peek changed them.
  struct Saved {
    int node, frame, last_live, touched;
    float log_prob;
  };
  struct Hyp {
    int node = 0;
    bool blank = true;    // the last frame was blank (or nothing yet)
    float acoustic = 0;   // log-sum of the merged paths
    float score = 0;      // acoustic + the node's static score (Step() sets it before sorting)
    bool stayed = false;  // !blank, and a path in it was on the node's label the frame before
  };

  int Child(int parent, int label, int frame, float log_prob);
  // LM + bonus for the word that ends at `node` (from its word_start), updating *state.
  float WordScore(int node, NgramLm::State* state) const;
  float FinalScore(const Hyp& h) const;
  // One frame: hyps -> the next hyps (merged, pruned to the beam).
  void Step(const float* lp, int vocab, int frame, std::vector<Hyp>* hyps);
  std::vector<CtcToken> Tokens(int node) const;
  void Compact();

  const std::vector<std::string>* labels_;
  int blank_id_;
  int space_id_ = -1;
  BeamOptions options_;
  const NgramLm* lm_;
  const PhraseBoost* boost_;
  std::vector<Node> nodes_;
  absl::flat_hash_map<uint64_t, int> children_;  // (parent << 16 | label) -> node
  std::vector<Hyp> hyps_;
  size_t compact_at_ = 0;                  // arena size that triggers the next Compact()
  std::vector<Hyp> next_scratch_;          // Step()'s, reused frame to frame
  uint32_t step_ = 0;                      // Step() calls, for the nodes' slot stamps
  std::vector<Saved>* journal_ = nullptr;  // set during Peek
  size_t journal_base_ = 0;                // nodes below this are logged before a change
  void Journal(int node);
};

}  // namespace jasper

#endif  // JASPER_ENGINE_DECODING_CTC_BEAM_H_
