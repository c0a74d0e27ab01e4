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

  std::vector<flatbuffers::Offset<xpk::NormalizerStep>> norm_steps;
  for (const xrt::NormalizerStep& n : spec.normalizer_steps) {
    norm_steps.push_back(
        xpk::CreateNormalizerStepDirect(fbb, n.type.c_str(), n.pattern.c_str(), n.content.c_str()));
  }
  auto norm_steps_vec = fbb.CreateVector(norm_steps);
  auto replacement = fbb.CreateString(spec.metaspace_replacement);
  auto prepend_scheme = fbb.CreateString(spec.metaspace_prepend_scheme);
  std::vector<flatbuffers::Offset<xpk::DecoderStep>> decoders;
  for (const xrt::DecoderStep& d : spec.decoders) {
    decoders.push_back(xpk::CreateDecoderStepDirect(fbb, d.type.c_str(), d.pattern.c_str(),
                                                    d.content.c_str(), d.start,
                                                    d.prepend_scheme.c_str()));
  }
  auto decoders_vec = fbb.CreateVector(decoders);

  return xpk::CreateTokenizer(fbb, model, vocab, merges_vec, added_vec, normalizer, regexes,
                              spec.individual_digits, spec.add_prefix_space, spec.ignore_merges,
                              spec.bos_id, spec.eos_id, spec.pad_id, spec.unk_id, spec.add_bos,
                              spec.add_eos, spec.byte_level, spec.byte_fallback, spec.fuse_unk,
                              norm_steps_vec, spec.metaspace, replacement, prepend_scheme,
                              spec.metaspace_split, decoders_vec);
}

}  // namespace xcc
