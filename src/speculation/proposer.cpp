#include "speculation/proposer.h"

namespace tf {

const char* proposer_kind_name(ProposerKind kind) {
  switch (kind) {
    case ProposerKind::long_copy: return "long_copy";
    case ProposerKind::ngram: return "ngram";
    case ProposerKind::replay: return "replay";
    case ProposerKind::drafter: return "drafter";
    case ProposerKind::mtp: return "mtp";
  }
  return "unknown";
}

}  // namespace tf
