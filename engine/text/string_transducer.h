// The single shortest path of a byte string composed with a weighted transducer, without
// building the composition: a layered Viterbi search over (input position, FST state), the query
// the ITN grammars answer per sentence (tagger) and per token (verbalizer). It gives the path
// OpenFst's Compose(StringAcceptor(s), fst) + ShortestPath(.., 1) gives: the same relation, the
// same tropical weights added in path order, so the same best weight; the test
// (tests/string_transducer_test.cc) checks both on random transducers and on the shipped grammars.
//
// Internal to engine/text (it includes OpenFst's headers, which the rest of the engine does not
// see): inverse_normalizer.cc and tests/string_transducer_test.cc include it.
//
// Ownership: owns a compact copy of the FST's arcs (16 bytes per arc), immutable after Compile.
// Thread-safety: ShortestPath() is const and may run concurrently on one instance; each calling
// thread keeps its search memory for reuse (thread_local: 8 bytes per state of the largest
// transducer it searched, about 480 KB for the shipped tagger, plus 16 bytes per search node,
// at most 1 MiB of them kept between calls).
#ifndef JASPER_ENGINE_TEXT_STRING_TRANSDUCER_H_
#define JASPER_ENGINE_TEXT_STRING_TRANSDUCER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <fst/vector-fst.h>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace jasper {

// One arc of a path, in path order: label 0 is epsilon; input labels are bytes 1-255.
struct PathArc {
  int ilabel;
  int olabel;
};

class StringTransducer {
 public:
  // `fst`: standard (tropical) arcs, sorted by input label, input labels 0-255 (0 = epsilon,
  // the rest bytes, as pynini's byte token type writes them), no cycle of input-epsilon arcs.
  // INVALID_ARGUMENT otherwise, naming `what` (e.g. the file) in the message.
  static absl::StatusOr<std::unique_ptr<const StringTransducer>> Compile(
      const fst::StdVectorFst& fst, absl::string_view what);

  // The arcs of the lowest-weight successful path that reads exactly `input`'s bytes, in order,
  // and its weight (final weight included). False when no path reads `input` (or it holds a
  // NUL byte, which no label can read). Ties: where candidates of equal weight reach the same
  // state after the same input, the one relaxed later wins (nodes in the order they were
  // reached, each node's arcs in input-label order); the same at the end among final states.
  // That is how NeMo's pynini search picks among the grammars' equal-weight taggings: it agrees
  // on 400 random word strings (tests/itn_test.cc) where keeping the first agreed on 99.25 %.
  // OpenFst's ShortestPath on the composition may pick another path of the same weight.
  bool ShortestPath(absl::string_view input, std::vector<PathArc>* path,
                    float* weight = nullptr) const;

 private:
  struct Arc {
    int32_t ilabel;
    int32_t olabel;
    float weight;
    int32_t next;
  };
  StringTransducer() = default;

  int start_ = -1;
  std::vector<int32_t> first_arc_;       // [num_states + 1]; a state's arcs, sorted by input label
  std::vector<int32_t> first_byte_arc_;  // [num_states]: its first arc with an input byte
  std::vector<Arc> arcs_;
  std::vector<float> final_;           // +inf where not final
  std::vector<int32_t> epsilon_rank_;  // topological rank in the input-epsilon graph
};

}  // namespace jasper

#endif  // JASPER_ENGINE_TEXT_STRING_TRANSDUCER_H_
