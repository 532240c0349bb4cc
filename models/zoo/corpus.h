// TrainingCorpus: a small embedded English text (~20 KB of varied prose,
// dialogue, questions and numbers) from which the zoo learns its BPE merges, so
// that ordinary English prompts tokenize into sensible word pieces.
#ifndef EXPERTD_MODELS_ZOO_CORPUS_H_
#define EXPERTD_MODELS_ZOO_CORPUS_H_

#include "absl/strings/string_view.h"

namespace expertd::models::zoo {

absl::string_view TrainingCorpus();

}  // namespace expertd::models::zoo

#endif  // EXPERTD_MODELS_ZOO_CORPUS_H_
