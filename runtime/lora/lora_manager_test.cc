#include "runtime/lora/lora_manager.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace xrt {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Two targets (in 3 -> out 2, in 2 -> out 4), rank 2, `slots` slots.
LoraGeometry Geometry(int64_t slots) {
  LoraGeometry g;
  g.max_loras = slots;
  g.spec.max_lora_rank = 2;
  g.spec.target_modules = {"q_proj"};
  g.spec.targets = {{"t0", 3, 2}, {"t1", 2, 4}};
  return g;
}

// An adapter whose packed floats are all `value`.
std::shared_ptr<const LoraAdapter> Adapter(LoraRegistry& reg, const std::string& name,
                                           float value) {
  LoraAdapter a;
  a.name = name;
  a.rank = 2;
  a.owned.assign(PackedLoraFloats(reg.geometry().spec), value);
  auto r = reg.AddPacked(std::move(a));
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : nullptr;
}

TEST(LoraRegistry, NamesAreUniqueAndIdsStable) {
  LoraRegistry reg(Geometry(2));
  auto a = Adapter(reg, "a", 1), b = Adapter(reg, "b", 2);
  EXPECT_NE(a->id, b->id);
  EXPECT_GT(a->id, 0);
  LoraAdapter dup;
  dup.name = "a";
  dup.owned = {1};
  auto again = reg.AddPacked(dup);
  ASSERT_FALSE(again.ok());
  EXPECT_THAT(again.status().message(), HasSubstr("'a' is already loaded"));
  EXPECT_EQ(reg.Find("b"), b);
  ASSERT_TRUE(reg.Unload("b").ok());
  EXPECT_EQ(reg.Find("b"), nullptr);
  EXPECT_EQ(reg.Unload("b").code(), StatusCode::kNotFound);
  // A new adapter under a freed name gets a new id (no KV block sharing).
  auto b2 = Adapter(reg, "b", 3);
  EXPECT_NE(b2->id, b->id);
  EXPECT_EQ(reg.List().size(), 2u);
}

// xrt run --max-lora-rank: adapters above the served rank are refused, also
// those already registered when the limit is set.
TEST(LoraRegistry, LimitRankRefusesHigherRanks) {
  LoraRegistry reg(Geometry(2));
  auto a = Adapter(reg, "a", 1);  // rank 2
  EXPECT_THAT(reg.LimitRank(1).message(),
              HasSubstr("'a': LoRA rank 2 is greater than max_lora_rank 1"));
  EXPECT_THAT(reg.LimitRank(3).message(), HasSubstr("must be in [1, 2]"));
  ASSERT_TRUE(reg.Unload("a").ok());
  ASSERT_TRUE(reg.LimitRank(1).ok());
  LoraAdapter b;
  b.name = "b";
  b.rank = 2;
  b.owned.assign(PackedLoraFloats(reg.geometry().spec), 0.5f);
  EXPECT_THAT(reg.AddPacked(b).status().message(), HasSubstr("greater than max_lora_rank 1"));
  b.rank = 1;
  EXPECT_TRUE(reg.AddPacked(b).ok());
}

TEST(LoraManager, ResidentAdaptersKeepTheirSlotAndLruIsEvicted) {
  LoraRegistry reg(Geometry(2));
  auto a = Adapter(reg, "a", 1), b = Adapter(reg, "b", 2), c = Adapter(reg, "c", 3);
  LoraManager m(reg.geometry(), /*allocate=*/true);
  auto s = m.Activate({a, b});
  ASSERT_TRUE(s.ok());
  EXPECT_THAT(*s, ElementsAre(0, 1));
  EXPECT_EQ(m.stats().loads, 2);
  EXPECT_EQ(m.stats().swaps, 0);
  s = m.Activate({b});  // a is now the least recently used
  ASSERT_TRUE(s.ok());
  EXPECT_THAT(*s, ElementsAre(1));
  s = m.Activate({c, b});
  ASSERT_TRUE(s.ok());
  EXPECT_THAT(*s, ElementsAre(0, 1));
  EXPECT_EQ(m.stats().loads, 3);
  EXPECT_EQ(m.stats().swaps, 1);
  EXPECT_EQ(m.slot_adapter(0), c->id);
  // Slot 0's A of target 1 ([2][2]) and Bᵀ of target 0 ([2][2]) hold c's values;
  // slot 1 holds b's.
  const LoraSlotBuffers& buf = m.buffers();
  EXPECT_EQ(buf.a[1][0], 3.0f);
  EXPECT_EQ(buf.b[0][3], 3.0f);
  EXPECT_EQ(buf.a[0][6], 2.0f);      // slot 1 of target 0's A: offset 1 * 2 * 3
  EXPECT_EQ(buf.b[1][8 + 7], 2.0f);  // slot 1 of target 1's Bᵀ: offset 1 * 2 * 4
}

TEST(LoraManager, RejectsTooManyDuplicateOrNullAdapters) {
  LoraRegistry reg(Geometry(1));
  auto a = Adapter(reg, "a", 1), b = Adapter(reg, "b", 2);
  LoraManager m(reg.geometry(), /*allocate=*/false);
  auto s = m.Activate({a, b});
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.status().message(),
              HasSubstr("2 LoRA adapters in one step, but the artifact has 1"));
  LoraManager m2(Geometry(2), /*allocate=*/false);
  EXPECT_THAT(m2.Activate({a, a}).status().message(), HasSubstr("listed twice"));
  EXPECT_THAT(m2.Activate({nullptr}).status().message(), HasSubstr("null"));
  // Bookkeeping only: no buffers, but slots are still assigned.
  EXPECT_TRUE(m2.buffers().a.empty());
  auto ok = m2.Activate({b});
  ASSERT_TRUE(ok.ok());
  EXPECT_THAT(*ok, ElementsAre(0));
}

TEST(ParseLoraModules, NameEqualsPath) {
  auto p = ParseLoraModules({"sql=/a/b", "chat=rel/dir=x"});
  ASSERT_TRUE(p.ok());
  ASSERT_EQ(p->size(), 2u);
  EXPECT_EQ((*p)[1].first, "chat");
  EXPECT_EQ((*p)[1].second, "rel/dir=x");
  for (const char* bad : {"noequals", "=path", "name="})
    EXPECT_THAT(ParseLoraModules({bad}).status().message(), HasSubstr("is not name=path")) << bad;
  EXPECT_THAT(ParseLoraModules({"a=x", "a=y"}).status().message(), HasSubstr("'a' is given twice"));
}

}  // namespace
}  // namespace xrt
