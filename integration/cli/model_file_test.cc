// models.txt as the sm70ops tool reads it: the file the build embedded parses to the model's
// numbers and plan, and each way of breaking the format is refused naming the file, the line and
// what is wrong, in the words of the Python package's parser (integration/python/tests/
// test_models_file.py has the same cases).
#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

extern "C" {
#include "integration/cli/model_file.h"
#include "integration/cli/model_shapes.h"
}

namespace {

// Parses `text`; the error message, or "" when it parsed.
std::string ParseError(const std::string &text, model_table *table) {
  char error[512] = "";
  return model_file_parse(text.c_str(), text.size(), "models.txt", table, error, sizeof(error))
             ? ""
             : error;
}

// Reads the minimal valid file, which the Python package's test reads too (a runfile of this
// test), into good_text_.
class ModelFileText : public testing::Test {
 protected:
  void SetUp() override {
    const char *path = "integration/python/tests/tiny_models.txt";
    std::ifstream file(path);
    ASSERT_TRUE(file.is_open()) << "cannot open the runfile " << path;
    std::stringstream text;
    text << file.rdbuf();
    good_text_ = text.str();
    ASSERT_FALSE(good_text_.empty()) << path << " is empty";
  }

  std::string good_text_;
};

TEST(ModelFile, EmbeddedFileHoldsTheModelAndItsPlan) {
  const model_table *t = model_table_get();
  ASSERT_NE(t, nullptr);
  const model_shape *m = model_shapes_of(t, "model");
  ASSERT_NE(m, nullptr);
  EXPECT_STREQ(m->name, "Qwen3.8-Flash-Next");
  EXPECT_EQ(m->hidden, 2560);
  EXPECT_EQ(m->q_heads, 24);
  EXPECT_EQ(m->compress_ratio, 4);
  EXPECT_EQ(m->expert_inter, 640);
  EXPECT_EQ(m->attention_gate, 1);
  EXPECT_EQ(m->index_weighted, 0);
  EXPECT_EQ(m->page_size, 64);
  EXPECT_EQ(m->chunk_rows, 8192);
  ASSERT_NE(model_shapes_of(t, "v1"), nullptr);
  EXPECT_EQ(model_shapes_of(t, "v1")->index_weighted, 1);
  model_case cases[kModelMaxCases];
  EXPECT_EQ(model_plan(t, 0, 0, cases), 48);  // what `sm70ops check` lists
  EXPECT_EQ(model_plan(t, 4, 64, cases), 4 + 4 + 2);
}

TEST_F(ModelFileText, MinimalFileParses) {
  model_table t;
  ASSERT_EQ(ParseError(good_text_, &t), "");
  EXPECT_EQ(t.shape_count, 1);
  EXPECT_STREQ(t.shapes[0].name, "Tiny Model");
  EXPECT_EQ(t.tp_sizes.count, 2);
  EXPECT_EQ(t.tp_sizes.values[1], 2);
  EXPECT_EQ(t.shapes[0].tp, 1);
}

// `text` with the first `from` replaced by `to`; a failure, and `text` as is, when it lacks `from`.
std::string Replace(std::string text, const std::string &from, const std::string &to) {
  const size_t at = text.find(from);
  if (at == std::string::npos) {
    ADD_FAILURE() << "the text lacks '" << from << "'";
    return text;
  }
  return text.replace(at, from.size(), to);
}

// The number of the last line of `text` that is `needle`.
int LineOf(const std::string &text, const std::string &needle) {
  std::istringstream lines(text);
  int number = 0, found = 0;
  for (std::string line; std::getline(lines, line);) {
    ++number;
    if (line == needle) found = number;
  }
  return found;
}

struct Broken {
  std::function<std::string(const std::string &)> breaking;
  std::string message;
  std::string line;  // the line the message names; "" for the whole file
};

std::function<std::string(const std::string &)> Replacing(std::string from, std::string to) {
  return [from, to](const std::string &t) { return Replace(t, from, to); };
}

TEST_F(ModelFileText, BrokenFileIsRefusedSayingWhere) {
  const std::string kNulLine(
      "hidden = 2\0"
      "56",
      12);
  const std::string kLongName = "name = " + std::string(48, 'x');
  const std::string kLongLine = "# " + std::string(254, 'x');
  const std::vector<Broken> broken = {
      {Replacing("hidden = 256", "hidden = 256\nhidden = 512"),
       "key 'hidden' given twice in [shapes model]", "hidden = 512"},
      {Replacing("hidden = 256", "hiden = 256"), "unknown key 'hiden' in [shapes model]",
       "hiden = 256"},
      {Replacing("hidden = 256\n", ""), "[shapes model] lacks 'hidden'", "[shapes model]"},
      {Replacing("hidden = 256", "hidden = 2.5k"), "'2.5k' is not a decimal integer below 2^31",
       "hidden = 2.5k"},
      {Replacing("hidden = 256", "hidden = -256"), "'-256' is not a decimal integer below 2^31",
       "hidden = -256"},
      {Replacing("hidden = 256", "hidden = 2147483648"),
       "'2147483648' is not a decimal integer below 2^31", "hidden = 2147483648"},
      {Replacing("attention_gate = 1", "attention_gate = 2"), "'2' is not 0 or 1",
       "attention_gate = 2"},
      {Replacing("tp_sizes = 1 2", "tp_sizes = 1 0"), "'1 0' is not a list of positive integers",
       "tp_sizes = 1 0"},
      {Replacing("page_sizes = 64", "page_sizes ="), "'' is not a list of positive integers",
       "page_sizes ="},
      {Replacing("name = Tiny Model", "name ="), "empty name", "name ="},
      {Replacing("chunk_rows = 8192", "chunk_rows 8192"), "'chunk_rows 8192' is not key = value",
       "chunk_rows 8192"},
      {Replacing("[plan]", "[plans]"), "'[plans]' is not a section header ([plan] or [shapes ID])",
       "[plans]"},
      {[](const std::string &t) { return t + "[plan]\n"; }, "section [plan] given twice", "[plan]"},
      {[](const std::string &t) { return "x = 1\n" + t; }, "key = value before any section",
       "x = 1"},
      {Replacing("[shapes model]", "[shapes other]"), "no [shapes model] section", ""},
      {Replacing("hidden = 256", kNulLine), "line holds a NUL byte", kNulLine},
      // Values check cannot plan with.
      {Replacing("hidden = 256", "hidden = 0"), "[shapes model] hidden must be positive",
       "[shapes model]"},
      {Replacing("compress_ratio = 4", "compress_ratio = 0"),
       "[shapes model] compress_ratio must be positive", "[shapes model]"},
      {Replacing("chunk_rows = 8192", "chunk_rows = 0"), "[plan] chunk_rows must be positive",
       "[plan]"},
      {Replacing("compress_ratio = 4", "compress_ratio = 3"),
       "[shapes model] compress_ratio 3 does not divide page size 64", "[shapes model]"},
      {Replacing("index_topk = 512", "index_topk = 510"),
       "[shapes model] compress_ratio 4 does not divide index_topk 510", "[shapes model]"},
      {Replacing("prefill_lengths = 8192", "prefill_lengths = 8192 16384"),
       "[plan] prefill length 16384 exceeds [shapes model] max_context 8192", "[plan]"},
      // The tool's capacities (model_file.h), which the Python parser mirrors.
      {Replacing("tp_sizes = 1 2", "tp_sizes = 1 2 3 4 5 6 7 8 9"), "more than 8 values",
       "tp_sizes = 1 2 3 4 5 6 7 8 9"},
      {[](const std::string &t) { return t + "[shapes a]\n[shapes b]\n[shapes c]\n[shapes d]\n"; },
       "more than 4 [shapes] sections", "[shapes d]"},
      {[](const std::string &t) { return t + "[shapes abcdefghijklmnop]\n"; },
       "id 'abcdefghijklmnop' longer than 15 characters", "[shapes abcdefghijklmnop]"},
      {Replacing("name = Tiny Model", kLongName), "name longer than 47 characters", kLongName},
      {[&](const std::string &t) { return kLongLine + "\n" + t; },
       "line longer than 255 characters", kLongLine},
  };
  for (const Broken &b : broken) {
    SCOPED_TRACE(b.message);
    const std::string text = b.breaking(good_text_);
    const std::string where =
        b.line.empty() ? "models.txt" : "models.txt:" + std::to_string(LineOf(text, b.line));
    model_table t;
    EXPECT_EQ(ParseError(text, &t), where + ": " + b.message);
  }
}

}  // namespace
