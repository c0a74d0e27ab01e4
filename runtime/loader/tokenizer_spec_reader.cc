#include "runtime/loader/tokenizer_spec_reader.h"

#include <algorithm>

#include "schemas/artifact_generated.h"

namespace xrt {
namespace {

std::string Str(const flatbuffers::String* s) { return s ? s->str() : std::string(); }

Status CheckSpecialId(const char* field, int32_t id, int64_t limit) {
  if (id < -1 || id >= limit) {
    return DataLossError("tokenizer: {} {} is outside [-1, {})", field, id, limit);
  }
  return Status::Ok();
}

}  // namespace

Status ValidateManifestTokenizer(const xpk::Tokenizer& t, int64_t config_vocab_size) {
  if (!t.model() || t.model()->size() == 0) {
    return DataLossError("tokenizer: model name missing");
  }
  if (!t.vocab() || t.vocab()->size() == 0) {
    return DataLossError("tokenizer: vocabulary is empty");
  }
  const int64_t limit =
      std::max<int64_t>(static_cast<int64_t>(t.vocab()->size()), config_vocab_size);
  if (t.merges()) {
    for (uint32_t i = 0; i < t.merges()->size(); ++i) {
      const xpk::MergeRule* m = t.merges()->Get(i);
      if (!m->left() || !m->right() || m->left()->size() == 0 || m->right()->size() == 0) {
        return DataLossError("tokenizer: merge {}: missing left or right side", i);
      }
    }
  }
  if (t.added_tokens()) {
    for (uint32_t i = 0; i < t.added_tokens()->size(); ++i) {
      const xpk::AddedToken* a = t.added_tokens()->Get(i);
      if (!a->content() || a->content()->size() == 0) {
        return DataLossError("tokenizer: added token {}: content missing", i);
      }
      if (a->id() < 0 || a->id() >= limit) {
        return DataLossError("tokenizer: added token {} ('{}'): id {} is outside [0, {})", i,
                             a->content()->string_view(), a->id(), limit);
      }
    }
  }
  if (t.split_regexes()) {
    for (uint32_t i = 0; i < t.split_regexes()->size(); ++i) {
      if (t.split_regexes()->Get(i)->size() == 0) {
        return DataLossError("tokenizer: split regex {} is empty", i);
      }
    }
  }
  if (t.normalizer_steps()) {
    for (uint32_t i = 0; i < t.normalizer_steps()->size(); ++i) {
      if (!t.normalizer_steps()->Get(i)->type()) {
        return DataLossError("tokenizer: normalizer step {}: type missing", i);
      }
    }
  }
  if (t.decoders()) {
    for (uint32_t i = 0; i < t.decoders()->size(); ++i) {
      if (!t.decoders()->Get(i)->type()) {
        return DataLossError("tokenizer: decoder step {}: type missing", i);
      }
    }
  }
  XRT_RETURN_IF_ERROR(CheckSpecialId("bos_id", t.bos_id(), limit));
  XRT_RETURN_IF_ERROR(CheckSpecialId("eos_id", t.eos_id(), limit));
  XRT_RETURN_IF_ERROR(CheckSpecialId("pad_id", t.pad_id(), limit));
  XRT_RETURN_IF_ERROR(CheckSpecialId("unk_id", t.unk_id(), limit));
  if (t.add_bos() && t.bos_id() < 0) {
    return DataLossError("tokenizer: add_bos is set but bos_id is -1");
  }
  if (t.add_eos() && t.eos_id() < 0) {
    return DataLossError("tokenizer: add_eos is set but eos_id is -1");
  }
  return Status::Ok();
}

Expected<TokenizerSpec> TokenizerSpecFromManifest(const xpk::Tokenizer& t,
                                                  int64_t config_vocab_size) {
  XRT_RETURN_IF_ERROR(ValidateManifestTokenizer(t, config_vocab_size));
  TokenizerSpec spec;
  spec.model = Str(t.model());
  spec.vocab.reserve(t.vocab()->size());
  for (const flatbuffers::String* s : *t.vocab()) spec.vocab.push_back(s->str());
  if (t.merges()) {
    spec.merges.reserve(t.merges()->size());
    for (const xpk::MergeRule* m : *t.merges()) {
      spec.merges.emplace_back(m->left()->str(), m->right()->str());
    }
  }
  if (t.added_tokens()) {
    spec.added_tokens.reserve(t.added_tokens()->size());
    for (const xpk::AddedToken* a : *t.added_tokens()) {
      AddedToken out;
      out.id = a->id();
      out.content = a->content()->str();
      out.special = a->special();
      out.lstrip = a->lstrip();
      out.rstrip = a->rstrip();
      out.normalized = a->normalized();
      out.single_word = a->single_word();
      spec.added_tokens.push_back(std::move(out));
    }
  }
  spec.normalizer = Str(t.normalizer());
  if (t.split_regexes()) {
    for (const flatbuffers::String* s : *t.split_regexes()) spec.split_regexes.push_back(s->str());
  }
  spec.individual_digits = t.individual_digits();
  spec.add_prefix_space = t.add_prefix_space();
  spec.ignore_merges = t.ignore_merges();
  spec.bos_id = t.bos_id();
  spec.eos_id = t.eos_id();
  spec.pad_id = t.pad_id();
  spec.unk_id = t.unk_id();
  spec.add_bos = t.add_bos();
  spec.add_eos = t.add_eos();
  spec.byte_level = t.byte_level();
  spec.byte_fallback = t.byte_fallback();
  spec.fuse_unk = t.fuse_unk();
  if (t.normalizer_steps()) {
    for (const xpk::NormalizerStep* n : *t.normalizer_steps()) {
      spec.normalizer_steps.push_back({Str(n->type()), Str(n->pattern()), Str(n->content())});
    }
  }
  spec.metaspace = t.metaspace();
  spec.metaspace_replacement = Str(t.metaspace_replacement());
  spec.metaspace_prepend_scheme = Str(t.metaspace_prepend_scheme());
  spec.metaspace_split = t.metaspace_split();
  if (t.decoders()) {
    for (const xpk::DecoderStep* d : *t.decoders()) {
      DecoderStep step;
      step.type = Str(d->type());
      step.pattern = Str(d->pattern());
      step.content = Str(d->content());
      step.start = d->start();
      step.prepend_scheme = Str(d->prepend_scheme());
      spec.decoders.push_back(std::move(step));
    }
  }
  return spec;
}

}  // namespace xrt
