#include "compiler/artifact/tokenizer_spec_writer.h"

#include <vector>

namespace xcc {

flatbuffers::Offset<xpk::Tokenizer> BuildTokenizer(flatbuffers::FlatBufferBuilder& fbb,
                                                   const xrt::TokenizerSpec& spec) {
  auto model = fbb.CreateString(spec.model);
  auto vocab = fbb.CreateVectorOfStrings(spec.vocab);

  std::vector<flatbuffers::Offset<xpk::MergeRule>> merges;
  merges.reserve(spec.merges.size());
  for (const auto& [left, right] : spec.merges) {
    auto l = fbb.CreateString(left);
    auto r = fbb.CreateString(right);
    merges.push_back(xpk::CreateMergeRule(fbb, l, r));
  }
  auto merges_vec = fbb.CreateVector(merges);

  std::vector<flatbuffers::Offset<xpk::AddedToken>> added;
  added.reserve(spec.added_tokens.size());
  for (const xrt::AddedToken& a : spec.added_tokens) {
    auto content = fbb.CreateString(a.content);
    added.push_back(xpk::CreateAddedToken(fbb, a.id, content, a.special, a.lstrip, a.rstrip,
                                          a.normalized, a.single_word));
  }
  auto added_vec = fbb.CreateVector(added);

  auto normalizer = fbb.CreateString(spec.normalizer);
  auto regexes = fbb.CreateVectorOfStrings(spec.split_regexes);

  return xpk::CreateTokenizer(fbb, model, vocab, merges_vec, added_vec, normalizer, regexes,
                              spec.individual_digits, spec.add_prefix_space, spec.ignore_merges,
                              spec.bos_id, spec.eos_id, spec.pad_id, spec.unk_id, spec.add_bos,
                              spec.add_eos);
}

}  // namespace xcc
