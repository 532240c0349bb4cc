#include "models/chat_template/value.h"

#include "gtest/gtest.h"

namespace expertd::chat_template {
namespace {

TEST(PythonFloatReprTest, MatchesPythonRepr) {
  EXPECT_EQ(PythonFloatRepr(1.0), "1.0");
  EXPECT_EQ(PythonFloatRepr(0.1), "0.1");
  EXPECT_EQ(PythonFloatRepr(2.5), "2.5");
  EXPECT_EQ(PythonFloatRepr(-3.0), "-3.0");
  EXPECT_EQ(PythonFloatRepr(1e-5), "1e-05");
  EXPECT_EQ(PythonFloatRepr(0.0001), "0.0001");
  EXPECT_EQ(PythonFloatRepr(1e16), "1e+16");
  EXPECT_EQ(PythonFloatRepr(1234567890123456.0), "1234567890123456.0");
  EXPECT_EQ(PythonFloatRepr(1.5e300), "1.5e+300");
  EXPECT_EQ(PythonFloatRepr(0.30000000000000004), "0.30000000000000004");
}

TEST(ValueTest, PythonStrAndRepr) {
  EXPECT_EQ(ToPythonStr(Value::None()), "None");
  EXPECT_EQ(ToPythonStr(Value::Bool(true)), "True");
  EXPECT_EQ(ToPythonStr(Value::Undefined("x")), "");
  Value list = Value::MakeList({Value::Int(1), Value::String("a'b"), Value::String("it's \"q\""),
                                Value::None(), Value::Float(1.5)});
  EXPECT_EQ(ToPythonStr(list), R"([1, "a'b", 'it\'s "q"', None, 1.5])");
  Value dict = Value::MakeDict({{"k", Value::Bool(false)}, {"n", Value::String("a\nb")}});
  EXPECT_EQ(ToPythonStr(dict), R"({'k': False, 'n': 'a\nb'})");
}

TEST(ValueTest, JsonDumpsLikePython) {
  auto v = Value::FromJson(nlohmann::ordered_json::parse(
      R"({"b": [1, 2.0, "é\n\u0001"], "a": {}, "c": [], "d": null, "e": true})"));
  EXPECT_EQ(*JsonDumps(v, {}),
            R"({"b": [1, 2.0, "é\n\u0001"], "a": {}, "c": [], "d": null, "e": true})");
  JsonDumpOptions indented;
  indented.indent = 2;
  EXPECT_EQ(*JsonDumps(Value::FromJson(nlohmann::ordered_json::parse(R"({"a": [1, {"b": 2}]})")),
                       indented),
            "{\n  \"a\": [\n    1,\n    {\n      \"b\": 2\n    }\n  ]\n}");
  JsonDumpOptions sorted;
  sorted.sort_keys = true;
  sorted.separators = std::make_pair(std::string(","), std::string(":"));
  EXPECT_EQ(
      *JsonDumps(Value::FromJson(nlohmann::ordered_json::parse(R"({"b": 1, "a": 2})")), sorted),
      R"({"a":2,"b":1})");
  EXPECT_FALSE(JsonDumps(Value::Undefined(), {}).ok());
}

TEST(ValueTest, EqualityAndOrderFollowPython) {
  EXPECT_TRUE(Equals(Value::Int(1), Value::Float(1.0)));
  EXPECT_TRUE(Equals(Value::Bool(true), Value::Int(1)));
  EXPECT_FALSE(Equals(Value::String("1"), Value::Int(1)));
  EXPECT_TRUE(Equals(Value::MakeDict({{"a", Value::Int(1)}, {"b", Value::Int(2)}}),
                     Value::MakeDict({{"b", Value::Int(2)}, {"a", Value::Int(1)}})));
  EXPECT_TRUE(*LessThan(Value::String("a"), Value::String("b")));
  EXPECT_FALSE(LessThan(Value::String("a"), Value::Int(1)).ok());
}

}  // namespace
}  // namespace expertd::chat_template
