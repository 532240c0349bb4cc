// The syntax tree of a parsed chat template: expressions and statements, with
// the source line of each for error messages.
#ifndef EXPERTD_MODELS_CHAT_TEMPLATE_AST_H_
#define EXPERTD_MODELS_CHAT_TEMPLATE_AST_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "models/chat_template/value.h"

namespace expertd::chat_template {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;
using KeywordArgs = std::vector<std::pair<std::string, ExprPtr>>;

struct Expr {
  enum class Kind {
    kLiteral,    // literal
    kName,       // name
    kList,       // children: items
    kTuple,      // children: items
    kDict,       // children: key0, value0, key1, value1, ...
    kAttr,       // children[0].name
    kSubscript,  // children[0][children[1]]
    kSlice,      // children[0][children[1]:children[2]:children[3]] (null = omitted)
    kCall,       // children[0](children[1..], kwargs)
    kFilter,     // children[0] | name(children[1..], kwargs)
    kTest,       // children[0] is [not] name(children[1..])
    kNeg,        // -children[0]
    kPos,        // +children[0]
    kNot,        // not children[0]
    kBinary,     // children[0] op children[1]: + - * / // % ** ~ and or
    kCompare,    // children[0] ops[0] children[1] ops[1] children[2] ...
    kCondition,  // children[1] if children[0] else children[2] (null = undefined)
  };
  Kind kind;
  int line = 0;
  Value literal;
  std::string name;  // name, attribute, filter, test or operator
  bool negated = false;
  std::vector<ExprPtr> children;
  KeywordArgs kwargs;
  std::vector<std::string> ops;  // kCompare: == != < <= > >= in notin
};

struct Node;
using NodePtr = std::unique_ptr<Node>;
using Body = std::vector<NodePtr>;

struct Node {
  enum class Kind {
    kText,      // text
    kOutput,    // {{ expr }}
    kIf,        // branches (cond, body)..., else_body
    kFor,       // for targets in expr [if filter]: body [else else_body]
    kSet,       // set targets = expr, or set targets[0].attr = expr (attr non-empty)
    kSetBlock,  // set targets[0] %} body {% endset
    kMacro,     // macro name(params) body
    kBreak,
    kContinue,
    kScope,  // body rendered in place (the {% generation %} extension)
  };
  Kind kind;
  int line = 0;
  std::string text;  // kText
  std::string name;  // kMacro: name; kSet: namespace attribute
  ExprPtr expr;      // kOutput, kFor iterable, kSet value
  ExprPtr filter;    // kFor: optional `if` condition
  std::vector<std::string> targets;
  std::vector<std::pair<ExprPtr, Body>> branches;  // kIf
  Body body;
  Body else_body;
  std::vector<std::pair<std::string, ExprPtr>> params;  // kMacro: name, default (or null)
};

}  // namespace expertd::chat_template

#endif  // EXPERTD_MODELS_CHAT_TEMPLATE_AST_H_
