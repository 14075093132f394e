// Where a program finds a model folder when the user names none: the shipped default model.
// Used by jasper-server and jasper-transcribe so that both behave alike without --model_dir.
//
// Thread-safety: reads the filesystem only; safe to call from any thread.
#ifndef JASPER_ENGINE_MODEL_DEFAULT_MODEL_DIR_H_
#define JASPER_ENGINE_MODEL_DEFAULT_MODEL_DIR_H_

#include <string>

namespace jasper {

// The places searched, in order, as one line for --help texts and error messages.
inline constexpr char kDefaultModelSearchPath[] =
    "<binary>/../share/jasper-serve/models, <binary>/../models, <binary>/../../models "
    "(a build tree) or ./models";

// The first folder holding a model.json in kDefaultModelSearchPath: the root itself when it is
// a model folder, otherwise its alphabetically first model sub-folder. "" when there is none.
std::string FindDefaultModelDir();

}  // namespace jasper

#endif  // JASPER_ENGINE_MODEL_DEFAULT_MODEL_DIR_H_
