#include "runtime/tokenizer/bpe_model.h"

#include <mutex>
#include <queue>

#include "runtime/tokenizer/byte_level.h"
#include "runtime/tokenizer/utf8.h"

namespace xrt {

struct BpeModel::Cache {
  // Words longer than this are not cached; the cache stops growing when full.
  static constexpr size_t kMaxWordBytes = 256;
  static constexpr size_t kCapacity = 16384;
  std::mutex mu;
  std::unordered_map<std::string, std::vector<int32_t>> entries;
};

BpeModel::BpeModel() : cache_(std::make_unique<Cache>()) {}
BpeModel::BpeModel(BpeModel&&) noexcept = default;
BpeModel& BpeModel::operator=(BpeModel&&) noexcept = default;
BpeModel::~BpeModel() = default;

Expected<BpeModel> BpeModel::Create(const TokenizerSpec& spec,
                                    const std::vector<std::string>& token_bytes) {
  BpeModel model;
  model.unk_id_ = spec.unk_id;
  model.ignore_merges_ = spec.ignore_merges;
  model.byte_level_ = spec.byte_level;
  model.byte_fallback_ = spec.byte_fallback;
  model.fuse_unk_ = spec.fuse_unk;
  // Index by the vocabulary's spelling; byte-level BPE can only produce tokens
  // spelled in the byte-level alphabet.
  std::unordered_map<std::string_view, int32_t> by_text;
  by_text.reserve(spec.vocab.size());
  for (size_t id = 0; id < spec.vocab.size(); ++id) {
    if (spec.vocab[id].empty()) continue;
    by_text.emplace(spec.vocab[id], static_cast<int32_t>(id));
    if (!spec.byte_level) {
      model.bytes_to_id_.emplace(spec.vocab[id], static_cast<int32_t>(id));
    } else if (byte_level::Decode(spec.vocab[id]).has_value()) {
      model.bytes_to_id_.emplace(token_bytes[id], static_cast<int32_t>(id));
    }
  }
  for (int b = 0; b < 256; ++b) {
    // As `tokenizers` spells a fallback byte: format!("<{b:#04X}>").
    const std::string key =
        spec.byte_level ? std::string(1, static_cast<char>(b)) : fmt::format("<0x{:02X}>", b);
    auto it = model.bytes_to_id_.find(key);
    model.byte_ids_[b] = it == model.bytes_to_id_.end() ? -1 : it->second;
  }
  model.merges_.reserve(spec.merges.size());
  std::string joined;
  for (size_t rank = 0; rank < spec.merges.size(); ++rank) {
    const auto& [left, right] = spec.merges[rank];
    joined = left + right;
    int32_t ids[3];
    const std::string* parts[3] = {&left, &right, &joined};
    for (int k = 0; k < 3; ++k) {
      auto it = by_text.find(*parts[k]);
      if (it == by_text.end()) {
        return InvalidArgumentError("merge #{} '{} {}': token '{}' is not in the vocabulary", rank,
                                    left, right, *parts[k]);
      }
      ids[k] = it->second;
    }
    // The first (lowest-rank) rule for a pair wins.
    model.merges_.emplace(PairKey(ids[0], ids[1]), MergeInfo{static_cast<int32_t>(rank), ids[2]});
  }
  return model;
}

void BpeModel::Encode(std::string_view word, std::vector<int32_t>* ids) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    auto it = bytes_to_id_.find(std::string(word));
    if (it != bytes_to_id_.end()) {
      ids->push_back(it->second);
      return;
    }
  }
  const bool cacheable = word.size() <= Cache::kMaxWordBytes;
  std::string key;
  if (cacheable) {
    key.assign(word);
    std::lock_guard<std::mutex> lock(cache_->mu);
    auto it = cache_->entries.find(key);
    if (it != cache_->entries.end()) {
      ids->insert(ids->end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t first = ids->size();
  Merge(word, ids);
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_->mu);
    if (cache_->entries.size() < Cache::kCapacity) {
      cache_->entries.emplace(std::move(key),
                              std::vector<int32_t>(ids->begin() + first, ids->end()));
    }
  }
}

void BpeModel::Merge(std::string_view word, std::vector<int32_t>* ids) const {
  struct Symbol {
    int32_t id;
    int32_t prev;
    int32_t next;
    bool alive;
  };
  std::vector<int32_t> initial;
  InitialSymbols(word, &initial);
  if (initial.empty()) return;
  std::vector<Symbol> symbols;
  symbols.reserve(initial.size());
  for (int32_t id : initial) {
    const int32_t index = static_cast<int32_t>(symbols.size());
    symbols.push_back({id, index - 1, index + 1, true});
  }
  symbols.back().next = -1;

  // Candidate merges ordered by (rank, position); stale entries are skipped
  // when popped.
  struct Candidate {
    int32_t rank;
    int32_t pos;
    int32_t merged_id;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> queue;
  auto push_pair = [&](int32_t pos) {
    const int32_t next = symbols[pos].next;
    if (next < 0) return;
    auto it = merges_.find(PairKey(symbols[pos].id, symbols[next].id));
    if (it != merges_.end()) queue.push({it->second.rank, pos, it->second.merged_id});
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(symbols.size()); ++i) push_pair(i);

  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& left = symbols[top.pos];
    if (!left.alive || left.next < 0) continue;
    Symbol& right = symbols[left.next];
    auto it = merges_.find(PairKey(left.id, right.id));
    if (it == merges_.end() || it->second.merged_id != top.merged_id) continue;
    left.id = top.merged_id;
    right.alive = false;
    left.next = right.next;
    if (left.next >= 0) symbols[left.next].prev = top.pos;
    if (left.prev >= 0) push_pair(left.prev);
    push_pair(top.pos);
  }
  for (int32_t i = 0; i >= 0; i = symbols[i].next) ids->push_back(symbols[i].id);
}

void BpeModel::InitialSymbols(std::string_view word, std::vector<int32_t>* symbols) const {
  symbols->reserve(word.size());
  // A pending unknown piece, added before the next known one (or at the end);
  // with fuse_unk, consecutive unknown pieces share it.
  bool pending_unk = false;
  auto unknown = [&] {
    if (unk_id_ < 0) return;
    if (pending_unk && !fuse_unk_) symbols->push_back(unk_id_);
    pending_unk = true;
  };
  auto known = [&](int32_t id) {
    if (pending_unk) symbols->push_back(unk_id_);
    pending_unk = false;
    symbols->push_back(id);
  };
  if (byte_level_) {
    for (unsigned char b : word) {
      if (byte_ids_[b] >= 0) {
        known(byte_ids_[b]);
      } else {
        unknown();
      }
    }
  } else {
    std::string piece;
    for (size_t pos = 0; pos < word.size();) {
      const size_t begin = pos;
      utf8::NextCodePoint(word, &pos);
      piece.assign(word.substr(begin, pos - begin));
      auto it = bytes_to_id_.find(piece);
      if (it != bytes_to_id_.end()) {
        known(it->second);
        continue;
      }
      if (byte_fallback_) {
        bool all = true;
        for (unsigned char b : piece) all = all && byte_ids_[b] >= 0;
        if (all) {
          // As `tokenizers` does, a pending unknown piece is not added first:
          // it comes after these bytes.
          for (unsigned char b : piece) symbols->push_back(byte_ids_[b]);
          continue;
        }
      }
      unknown();
    }
  }
  if (pending_unk) symbols->push_back(unk_id_);
}

}  // namespace xrt
