// SPDX-License-Identifier: Apache-2.0
// JSON Schema to GBNF (llama.cpp's grammar format): a grammar whose sentences are JSON texts
// valid against the schema, so a model's structured output can be constrained token by token.
// Written after llama.cpp's converter's design (common/json-schema-to-grammar.cpp), not its code;
// unlike it, anything unsupported is an error naming the keyword and its JSON pointer, e.g.
// "[json schema] unsupported keyword \"not\" at #/properties/a".
//
// Supported (draft 2020-12 spelling; draft-07 "definitions" too):
//   type (string, number, integer, boolean, null, object, array, and arrays of them); without
//     `type`, the type is inferred from type-specific keywords (properties → object, items →
//     array, pattern → string, minimum → number ...), else any JSON value;
//   properties (emitted in the schema's order; any subset of the optional ones may appear, in that
//     order, and required ones must), required, additionalProperties (false, true or a schema;
//     extra members come after the listed ones, under keys that are not listed names);
//     when additionalProperties is absent, extras are allowed (the spec) unless
//     JsonSchemaOptions::strict_properties (llama.cpp's default, and what a model should want);
//   enum, const (the values' canonical spelling, white space allowed between tokens);
//   items, prefixItems, minItems, maxItems;
//   minLength, maxLength (counted in characters, an escape counting as one), pattern (through
//     constrain/regex.hpp, ECMAScript search semantics: anchor with ^...$ for tight grammars),
//     format date, time, date-time, uuid, email (see format_rule: RFC 3339 shapes, each month's
//     days, February's to the 28th (leap days refused); email is a dot-atom local part @ a
//     dotted host);
//   minimum, maximum, exclusiveMinimum, exclusiveMaximum: exact for integers (a digit-range
//     grammar), and for numbers whose bounds are whole and >= 0 (written without exponent);
//     fractional bounds >= 0 are rounded inwards to whole ones (accepts less: 0.5 under
//     minimum 0.5 is refused) unless no whole number lies between them; other number bounds
//     only "no minus sign" when the lower bound is >= 0 (approximate);
//   anyOf, oneOf (treated as anyOf: a grammar cannot exclude the overlap), allOf when the parts
//     merge trivially (disjoint keywords, union of properties and required), sibling keywords
//     next to anyOf/oneOf/$ref (merged into each branch the same way);
//   $ref to "#", "#/$defs/..." and "#/definitions/..." (any local JSON pointer), recursion
//     included; annotations (title, description, default, examples, $comment, x-...) ignored.
// Approximations, all towards accepting less than the schema allows except where noted:
//   listed members must come in the schema's order (then any additional ones); numbers have at most
//   16 integer digits; integers are written without fraction or exponent;
//   "-0" is refused where bounds apply; strings must spell characters JSON need not escape
//   unescaped inside a `pattern`/format; known keys are excluded from additional properties only
//   in their plain spelling (accepts more: "\u0061" for "a"); a lone surrogate escape in a string
//   is accepted (accepts more); number bounds that are fractional or negative are not enforced
//   beyond the sign (accepts more).
// White space: after every token, at most one space or one newline with up to 20 spaces/tabs,
// so a model cannot loop on blank space; none before the first token.
#pragma once

#include "edgellm/constrain/json_schema_formats.hpp"
#include "edgellm/constrain/json_schema_numbers.hpp"
#include "edgellm/constrain/regex.hpp"
#include "edgellm/io/json.hpp"
#include "edgellm/io/json_value.hpp"
#include "edgellm/io/json_write.hpp"
#include "edgellm/result.hpp"

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace edgellm::constrain {

struct JsonSchemaOptions {
  /// Forbid members not listed in `properties` when the schema does not say
  /// (additionalProperties absent). False follows the spec (extras allowed, any value).
  bool strict_properties = false;
};

namespace detail {

// number() and format_rule() are its bases' (json_schema_numbers.hpp, json_schema_formats.hpp).
class SchemaCompiler : SchemaNumbers<SchemaCompiler>, SchemaFormats<SchemaCompiler> {
  friend SchemaNumbers<SchemaCompiler>;
  friend SchemaFormats<SchemaCompiler>;

 public:
  using Value = io::json::Value;

  SchemaCompiler(const Value& root, const JsonSchemaOptions& o) : root_(root), opt_(o) {
    for (const char* n : {"root", "ws", "value", "object", "array", "string", "char", "number",
                          "integer", "boolean", "null", "key"}) {
      taken_.insert(n);
    }
  }

  result<std::string> run() {
    rules_.push_back({"root", ""});
    std::string body = build(root_, "", "root");
    if (err_) return *err_;
    rules_[0].second = body;
    std::string out;
    for (const auto& [name, b] : rules_) out += name + " ::= " + b + "\n";
    return out;
  }

 private:
  // ---- rules -------------------------------------------------------------------------------

  static std::string sanitize(std::string_view hint) {
    std::string s;
    for (char c : hint) {
      char l = (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
      bool ok = (l >= 'a' && l <= 'z') || (l >= '0' && l <= '9');
      if (ok)
        s += l;
      else if (!s.empty() && s.back() != '-')
        s += '-';
    }
    while (!s.empty() && s.back() == '-') s.pop_back();
    if (s.size() > 60) s.resize(60);
    return s.empty() ? "r" : s;
  }

  std::string fresh_name(std::string_view hint) {
    std::string base = sanitize(hint), name = base;
    for (int i = 2; taken_.count(name); ++i) name = base + "-" + std::to_string(i);
    taken_.insert(name);
    return name;
  }

  // A rule for `body`, reusing an identical one; a body that is one rule name is that name.
  std::string add_rule(std::string_view hint, const std::string& body) {
    if (is_name(body)) return body;
    if (auto it = by_body_.find(body); it != by_body_.end()) return it->second;
    std::string name = fresh_name(hint);
    rules_.push_back({name, body});
    by_body_.emplace(body, name);
    return name;
  }

  static bool is_name(const std::string& s) {
    if (s.empty()) return false;
    for (char c : s) {
      if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-')) return false;
    }
    return true;
  }

  // The shared primitive rules, defined on first use.
  std::string prim(const std::string& name) {
    if (prims_.count(name)) return name;
    prims_.insert(name);
    static const std::map<std::string, std::string> bodies = {
        {"ws", "( \" \" | \"\\n\" [ \\t]{0,20} )?"},
        {"char", "[^\"\\\\\\x00-\\x1F] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4} )"},
        {"key", "\"\\\"\" char* \"\\\"\""},
        {"string", "\"\\\"\" char* \"\\\"\" ws"},
        {"number",
         "\"-\"? ( \"0\" | [1-9] [0-9]{0,15} ) ( \".\" [0-9]+ )? ( [eE] [-+]? [0-9]+ )? ws"},
        {"integer", "\"-\"? ( \"0\" | [1-9] [0-9]{0,15} ) ws"},
        {"boolean", "( \"true\" | \"false\" ) ws"},
        {"null", "\"null\" ws"},
        {"value", "object | array | string | number | boolean | null"},
        {"object",
         "\"{\" ws ( key ws \":\" ws value ( \",\" ws key ws \":\" ws value )* )? \"}\" ws"},
        {"array", "\"[\" ws ( value ( \",\" ws value )* )? \"]\" ws"},
    };
    static const std::map<std::string, std::vector<std::string>> deps = {
        {"char", {}},
        {"key", {"char"}},
        {"string", {"char", "ws"}},
        {"value", {"object", "array", "string", "number", "boolean", "null"}},
        {"object", {"key", "ws", "value"}},
        {"array", {"ws", "value"}},
    };
    rules_.push_back({name, bodies.at(name)});
    if (auto it = deps.find(name); it != deps.end()) {
      for (const auto& d : it->second) prim(d);
    } else if (name != "ws") {
      prim("ws");
    }
    return name;
  }

  // ---- errors ------------------------------------------------------------------------------

  static std::string at(const std::string& ptr) { return "#" + ptr; }
  static std::string child(const std::string& ptr, std::string_view key) {
    std::string out = ptr + "/";
    for (char c : key) {
      if (c == '~')
        out += "~0";
      else if (c == '/')
        out += "~1";
      else
        out += c;
    }
    return out;
  }
  std::string fail(errc code, const std::string& what) {
    if (!err_) err_ = make_error(code, "json schema", what);
    return "ws";  // any well-formed placeholder; the error wins
  }
  std::string unsupported(std::string_view keyword, const std::string& ptr,
                          std::string_view why = {}) {
    return fail(errc::unsupported, "unsupported keyword \"" + std::string(keyword) + "\" at " +
                                       at(ptr) + (why.empty() ? "" : ": " + std::string(why)));
  }

  // ---- keywords ----------------------------------------------------------------------------

  static bool annotation(std::string_view k) {
    static const std::set<std::string_view> names = {
        "$schema",    "$id",      "$comment",  "title", "description", "default", "examples",
        "deprecated", "readOnly", "writeOnly", "$defs", "definitions", "$anchor"};
    return names.count(k) || k.rfind("x-", 0) == 0;
  }
  static bool supported(std::string_view k) {
    static const std::set<std::string_view> names = {"type",
                                                     "enum",
                                                     "const",
                                                     "properties",
                                                     "required",
                                                     "additionalProperties",
                                                     "items",
                                                     "prefixItems",
                                                     "minItems",
                                                     "maxItems",
                                                     "minLength",
                                                     "maxLength",
                                                     "pattern",
                                                     "format",
                                                     "minimum",
                                                     "maximum",
                                                     "exclusiveMinimum",
                                                     "exclusiveMaximum",
                                                     "anyOf",
                                                     "oneOf",
                                                     "allOf",
                                                     "$ref"};
    return annotation(k) || names.count(k);
  }

  // The schema `ref` points to, or nullptr (with the error set).
  const Value* resolve(const std::string& ref, const std::string& ptr) {
    if (ref.empty() || ref[0] != '#') {
      unsupported("$ref", ptr,
                  "only local references (\"#/...\") are supported, not \"" + ref + "\"");
      return nullptr;
    }
    const Value* v = &root_;
    std::size_t i = 1;
    while (i < ref.size()) {
      if (ref[i] != '/') break;
      std::size_t j = ref.find('/', i + 1);
      if (j == std::string::npos) j = ref.size();
      std::string tok;
      for (std::size_t k = i + 1; k < j; ++k) {
        if (ref[k] == '~' && k + 1 < j) {
          tok += ref[k + 1] == '1' ? '/' : '~';
          ++k;
        } else {
          tok += ref[k];
        }
      }
      if (const auto* a = v->get_array()) {
        std::size_t idx = 0;
        for (char c : tok) idx = idx * 10 + static_cast<std::size_t>(c - '0');
        v = idx < a->size() ? &(*a)[idx] : nullptr;
      } else {
        v = v->find(tok);
      }
      if (v == nullptr) break;
      i = j;
    }
    if (v == nullptr || i != ref.size()) {
      fail(errc::invalid_argument, "$ref \"" + ref + "\" at " + at(ptr) + " does not resolve");
      return nullptr;
    }
    return v;
  }

  // Follows a schema made only of a $ref (and annotations) to its target.
  const Value* deref(const Value* s, const std::string& ptr) {
    for (int n = 0; n < 32 && s && s->is_object(); ++n) {
      const Value* r = s->find("$ref");
      if (!r) return s;
      for (const auto& m : s->as_object()) {
        if (m.key != "$ref" && !annotation(m.key)) return s;  // siblings: merged by build()
      }
      if (!r->is_string()) return (unsupported("$ref", ptr, "not a string"), nullptr);
      s = resolve(r->as_string(), ptr);
    }
    return s;
  }

  // allOf-style merge of two object schemas when it is trivially exact; else an error.
  std::optional<Value> merge(const Value& a, const Value& b, const std::string& ptr) {
    io::json::Object out = a.as_object();
    bool a_props = a.find("properties"), b_props = b.find("properties");
    if ((a.find("additionalProperties") && b_props) ||
        (b.find("additionalProperties") && a_props)) {
      unsupported("allOf", ptr, "additionalProperties in one part and properties in another");
      return std::nullopt;
    }
    for (const auto& m : b.as_object()) {
      if (annotation(m.key)) continue;
      Value* mine = const_cast<Value*>(out.find(m.key));
      if (!mine) {
        out.append(m.key, m.value);
      } else if (m.key == "properties" && mine->is_object() && m.value.is_object()) {
        for (const auto& p : m.value.as_object()) {
          const Value* q = mine->find(p.key);
          if (q && io::json::dump(*q) != io::json::dump(p.value)) {
            unsupported("allOf", ptr, "property \"" + p.key + "\" defined twice");
            return std::nullopt;
          }
          if (!q) mine->get_object()->append(p.key, p.value);
        }
      } else if (m.key == "required" && mine->is_array() && m.value.is_array()) {
        for (const auto& r : m.value.as_array()) mine->get_array()->push_back(r);
      } else if (io::json::dump(*mine) != io::json::dump(m.value)) {
        unsupported("allOf", ptr, "keyword \"" + m.key + "\" in more than one part");
        return std::nullopt;
      }
    }
    return Value(std::move(out));
  }

  // ---- schemas -----------------------------------------------------------------------------

  // A rule for `schema` (named after `hint` unless it is a shared or referenced one).
  std::string rule(const Value& schema, const std::string& ptr, const std::string& hint) {
    std::string body = build(schema, ptr, hint);
    if (err_) return "ws";
    return add_rule(hint, body);
  }

  // The GBNF body for `schema`.
  std::string build(const Value& schema, const std::string& ptr, const std::string& name) {
    if (err_) return "ws";
    if (++depth_ > 64) return fail(errc::unsupported, "schema nesting too deep at " + at(ptr));
    struct Leave {
      int& d;
      ~Leave() { --d; }
    } leave{depth_};
    if (auto b = schema.get_bool()) {
      if (*b) return prim("value");
      return fail(errc::unsupported, "schema false (matches nothing) at " + at(ptr));
    }
    if (!schema.is_object()) {
      return fail(errc::invalid_argument, "schema at " + at(ptr) + " is not an object or boolean");
    }
    for (const auto& m : schema.as_object()) {
      if (!supported(m.key)) return unsupported(m.key, ptr);
    }
    // Keywords other than the combinators and annotations, to merge into combinator branches.
    auto siblings = [&](std::string_view except) {
      io::json::Object o;
      for (const auto& m : schema.as_object()) {
        if (m.key != except && !annotation(m.key)) o.append(m.key, m.value);
      }
      return o;
    };
    if (const Value* r = schema.find("$ref")) {
      if (!r->is_string()) return unsupported("$ref", ptr, "not a string");
      io::json::Object sib = siblings("$ref");
      if (sib.empty()) return ref_rule(r->as_string(), ptr);
      const Value* target = deref(resolve(r->as_string(), ptr), ptr);
      if (!target) return "ws";
      if (target->is_bool()) return build(*target, ptr, name);
      auto merged = merge(*target, Value(std::move(sib)), ptr);
      if (!merged) return "ws";
      return build(own(std::move(*merged)), ptr, name);
    }
    if (const Value* all = schema.find("allOf")) {
      if (!all->is_array() || all->as_array().empty())
        return unsupported("allOf", ptr, "not a non-empty array");
      Value acc(siblings("allOf"));
      std::size_t i = 0;
      for (const auto& part : all->as_array()) {
        std::string pp = child(child(ptr, "allOf"), std::to_string(i++));
        const Value* p = deref(&part, pp);
        if (!p) return "ws";
        if (p->is_bool()) {
          if (p->as_bool()) continue;
          return build(*p, pp, name);
        }
        if (p->find("$ref") || p->find("anyOf") || p->find("oneOf") || p->find("allOf")) {
          return unsupported("allOf", pp, "a part with $ref siblings or a combinator");
        }
        auto m = merge(acc, *p, pp);
        if (!m) return "ws";
        acc = std::move(*m);
      }
      return build(own(std::move(acc)), ptr, name);
    }
    for (const char* kw : {"anyOf", "oneOf"}) {
      const Value* any = schema.find(kw);
      if (!any) continue;
      if (!any->is_array() || any->as_array().empty())
        return unsupported(kw, ptr, "not a non-empty array");
      io::json::Object sib = siblings(kw);
      std::string out;
      std::size_t i = 0;
      for (const auto& branch : any->as_array()) {
        std::string bp = child(child(ptr, kw), std::to_string(i));
        std::string hint = name + "-" + std::to_string(i++);
        std::string alt;
        if (sib.empty()) {
          alt = rule(branch, bp, hint);
        } else {
          const Value* b = deref(&branch, bp);
          if (!b) return "ws";
          if (b->is_bool()) {
            alt = rule(b->as_bool() ? Value(sib) : *b, bp, hint);
          } else {
            auto m = merge(Value(sib), *b, bp);
            if (!m) return "ws";
            alt = rule(own(std::move(*m)), bp, hint);
          }
        }
        out += (out.empty() ? "" : " | ") + alt;
      }
      return out;
    }
    if (const Value* c = schema.find("const")) return literal(*c);
    if (const Value* e = schema.find("enum")) {
      if (!e->is_array() || e->as_array().empty())
        return unsupported("enum", ptr, "not a non-empty array");
      std::string out;
      for (const auto& v : e->as_array()) out += (out.empty() ? "" : " | ") + literal(v);
      return out;
    }
    std::vector<std::string> types;
    if (const Value* t = schema.find("type")) {
      if (t->is_string()) {
        types.push_back(t->as_string());
      } else if (t->is_array()) {
        for (const auto& x : t->as_array()) {
          if (!x.is_string()) return unsupported("type", ptr, "not a string or array of strings");
          types.push_back(x.as_string());
        }
      } else {
        return unsupported("type", ptr, "not a string or array of strings");
      }
    } else {
      types = inferred_types(schema);
      if (types.empty()) return prim("value");
    }
    std::string out;
    for (const auto& t : types) {
      std::string alt;
      if (t == "object")
        alt = object(schema, ptr, types.size() > 1 ? name + "-object" : name);
      else if (t == "array")
        alt = array(schema, ptr, types.size() > 1 ? name + "-array" : name);
      else if (t == "string")
        alt = string(schema, ptr);
      else if (t == "integer")
        alt = number(schema, ptr, true);
      else if (t == "number")
        alt = number(schema, ptr, false);
      else if (t == "boolean")
        alt = prim("boolean");
      else if (t == "null")
        alt = prim("null");
      else
        return unsupported("type", ptr, "unknown type \"" + t + "\"");
      if (types.size() > 1 && !is_name(alt)) alt = "( " + alt + " )";
      out += (out.empty() ? "" : " | ") + alt;
    }
    return out;
  }

  static std::vector<std::string> inferred_types(const Value& s) {
    std::vector<std::string> t;
    auto has = [&](std::initializer_list<const char*> ks) {
      for (const char* k : ks) {
        if (s.find(k)) return true;
      }
      return false;
    };
    if (has({"properties", "required", "additionalProperties"})) t.push_back("object");
    if (has({"items", "prefixItems", "minItems", "maxItems"})) t.push_back("array");
    if (has({"minLength", "maxLength", "pattern", "format"})) t.push_back("string");
    if (has({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"})) t.push_back("number");
    return t;
  }

  const Value& own(Value v) { return owned_.emplace_back(std::move(v)); }

  std::string ref_rule(const std::string& ref, const std::string& ptr) {
    if (auto it = refs_.find(ref); it != refs_.end()) return it->second;
    const Value* target = resolve(ref, ptr);
    if (!target) return "ws";
    std::string hint = ref == "#" ? "root-ref" : ref.substr(ref.rfind('/') + 1);
    std::string name = fresh_name(hint);
    refs_.emplace(ref, name);
    std::size_t slot = rules_.size();
    rules_.push_back({name, ""});
    std::string body = build(*target, ref.substr(1), name);
    rules_[slot].second = body;
    return name;
  }

  // The canonical spelling of a JSON value, white space allowed after each token.
  std::string literal(const Value& v) {
    prim("ws");
    switch (v.type()) {
      case io::json::Type::object: {
        std::string out = "\"{\" ws";
        bool first = true;
        for (const auto& m : v.as_object()) {
          out += std::string(first ? "" : " \",\" ws") + " " +
                 gbnf::literal(io::json::escape(m.key)) + " ws \":\" ws " + literal(m.value);
          first = false;
        }
        return out + " \"}\" ws";
      }
      case io::json::Type::array: {
        std::string out = "\"[\" ws";
        bool first = true;
        for (const auto& e : v.as_array()) {
          out += std::string(first ? " " : " \",\" ws ") + literal(e);
          first = false;
        }
        return out + " \"]\" ws";
      }
      default:
        return "( " + gbnf::literal(io::json::dump(v)) + " ws )";
    }
  }

  // ---- objects -----------------------------------------------------------------------------

  std::string object(const Value& s, const std::string& ptr, const std::string& name) {
    struct Prop {
      std::string kv;
      bool required;
    };
    std::vector<Prop> props;
    std::vector<std::string> names;  // listed keys, excluded from additional members
    std::set<std::string> required;
    if (const Value* r = s.find("required")) {
      if (!r->is_array()) return unsupported("required", ptr, "not an array");
      for (const auto& x : r->as_array()) {
        if (!x.is_string()) return unsupported("required", ptr, "not an array of strings");
        required.insert(x.as_string());
      }
    }
    const Value* ps = s.find("properties");
    if (ps && !ps->is_object()) return unsupported("properties", ptr, "not an object");
    std::set<std::string> seen;
    if (ps) {
      for (const auto& m : ps->as_object()) {
        names.push_back(m.key);
        seen.insert(m.key);
        if (m.value.is_bool() && !m.value.as_bool()) {
          if (required.count(m.key)) {
            return fail(errc::unsupported,
                        "required property \"" + m.key + "\" has schema false at " + at(ptr));
          }
          continue;
        }
        std::string v = rule(m.value, child(child(ptr, "properties"), m.key), name + "-" + m.key);
        std::string kv = gbnf::literal(io::json::escape(m.key)) + " ws \":\" ws " + v;
        props.push_back({add_rule(name + "-" + m.key + "-kv", kv), required.count(m.key) > 0});
      }
    }
    for (const auto& r : required) {
      if (!seen.count(r)) {
        return unsupported("required", ptr, "\"" + r + "\" is not in properties");
      }
    }
    std::string extra;  // the rule for one additional member, or empty when none are allowed
    const Value* ap = s.find("additionalProperties");
    if ((ap == nullptr && !opt_.strict_properties) || (ap && !(ap->is_bool() && !ap->as_bool()))) {
      std::string v =
          ap ? rule(*ap, child(ptr, "additionalProperties"), name + "-additional") : prim("value");
      std::string key = names.empty() ? prim("key") : other_key(names, name + "-other-key");
      extra = add_rule(name + "-additional-kv", key + " ws \":\" ws " + v);
    }
    if (err_) return "ws";
    prim("ws");
    // Built from the end: tail_b follows a member, tail_a stands where none came yet.
    std::string tail_b = extra.empty() ? "" : "( \",\" ws " + extra + " )*";
    std::string tail_a = extra.empty() ? "" : "( " + extra + " ( \",\" ws " + extra + " )* )?";
    for (std::size_t i = props.size(); i-- > 0;) {
      const std::string& kv = props[i].kv;
      std::string after = tail_b.empty() ? "" : " " + tail_b;
      if (props[i].required) {
        tail_a = kv + after;
      } else if (tail_a.empty()) {
        tail_a = "( " + kv + after + " )?";
      } else {
        tail_a = "( " + kv + after + " | " + tail_a + " )";
      }
      std::string member = "\",\" ws " + kv;
      tail_b = (props[i].required ? member : "( " + member + " )?") + after;
    }
    return "\"{\" ws " + (tail_a.empty() ? "" : tail_a + " ") + "\"}\" ws";
  }

  // The quoted keys that are none of `names`: a trie of the names, leaving it at the first
  // character that differs. Names JSON must escape are not excluded (documented approximation).
  std::string other_key(const std::vector<std::string>& names, const std::string& hint) {
    prim("char");
    struct Node {
      std::map<char32_t, int> next;
      bool terminal = false;
    };
    std::vector<Node> trie(1);
    for (const auto& n : names) {
      std::string esc = io::json::escape(n);
      if (esc.size() != n.size() + 2) continue;  // needs escapes
      std::vector<char32_t> cps;
      if (!decode(n, cps)) continue;
      int at = 0;
      for (char32_t c : cps) {
        auto it = trie[at].next.find(c);
        if (it == trie[at].next.end()) {
          trie.push_back({});
          it = trie[at].next.emplace(c, static_cast<int>(trie.size() - 1)).first;
        }
        at = it->second;
      }
      trie[at].terminal = true;
    }
    std::vector<std::string> rule_names(trie.size());
    for (auto& r : rule_names) r = fresh_name(hint);
    const std::string rest = "char* \"\\\"\"";
    for (std::size_t i = 0; i < trie.size(); ++i) {
      gbnf::CharSet stop{{0, 0x1F}, {'"', '"'}, {'\\', '\\'}};
      std::string body = trie[i].terminal ? "" : "\"\\\"\"";
      auto alt = [&](const std::string& a) { body += (body.empty() ? "" : " | ") + a; };
      for (const auto& [c, to] : trie[i].next) {
        std::string u8;
        gbnf::append_utf8(u8, c);
        alt(gbnf::literal(u8) + " " + rule_names[static_cast<std::size_t>(to)]);
        stop.emplace_back(c, c);
      }
      gbnf::normalize(stop);
      alt(gbnf::char_class(gbnf::complement(stop)) + " " + rest);
      alt("\"\\\\\" ( [\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4} ) " + rest);
      rules_.push_back({rule_names[i], body});
    }
    return "\"\\\"\" " + rule_names[0];
  }

  static bool decode(std::string_view s, std::vector<char32_t>& out) {
    for (std::size_t i = 0; i < s.size();) {
      auto b = static_cast<unsigned char>(s[i]);
      int n = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
      if (n == 0 || i + static_cast<std::size_t>(n) > s.size()) return false;
      char32_t c = n == 1 ? b : n == 2 ? (b & 0x1F) : n == 3 ? (b & 0x0F) : (b & 0x07);
      for (int k = 1; k < n; ++k) c = (c << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
      out.push_back(c);
      i += static_cast<std::size_t>(n);
    }
    return true;
  }

  // ---- arrays ------------------------------------------------------------------------------

  std::optional<std::uint64_t> count(const Value& s, const char* kw, const std::string& ptr) {
    const Value* v = s.find(kw);
    if (!v) return std::nullopt;
    if (!v->is_integer() || v->as_int() < 0) {
      unsupported(kw, ptr, "not a non-negative integer");
      return std::nullopt;
    }
    return static_cast<std::uint64_t>(v->as_int());
  }

  static std::string repeat(const std::string& x, std::uint64_t lo,
                            std::optional<std::uint64_t> hi) {
    if (hi && *hi == 0) return "";
    if (!hi) return lo == 0 ? x + "*" : lo == 1 ? x + "+" : x + "{" + std::to_string(lo) + ",}";
    if (lo == 0 && *hi == 1) return x + "?";
    if (lo == *hi) return lo == 1 ? x : x + "{" + std::to_string(lo) + "}";
    return x + "{" + std::to_string(lo) + "," + std::to_string(*hi) + "}";
  }

  std::string array(const Value& s, const std::string& ptr, const std::string& name) {
    std::uint64_t lo = count(s, "minItems", ptr).value_or(0);
    std::optional<std::uint64_t> hi = count(s, "maxItems", ptr);
    if (err_) return "ws";
    if (hi && *hi < lo) return fail(errc::invalid_argument, "maxItems < minItems at " + at(ptr));
    std::vector<std::string> prefix;
    if (const Value* p = s.find("prefixItems")) {
      if (!p->is_array()) return unsupported("prefixItems", ptr, "not an array");
      std::size_t i = 0;
      for (const auto& x : p->as_array()) {
        std::string ip = child(child(ptr, "prefixItems"), std::to_string(i));
        prefix.push_back(rule(x, ip, name + "-" + std::to_string(i++)));
      }
    }
    std::string item;  // empty: no items past the prefix
    const Value* it = s.find("items");
    if (it && it->is_array()) return unsupported("items", ptr, "the array form; use prefixItems");
    if (!it || !(it->is_bool() && !it->as_bool())) {
      item = it ? rule(*it, child(ptr, "items"), name + "-item") : prim("value");
    }
    if (err_) return "ws";
    prim("ws");
    if (hi && prefix.size() > *hi) prefix.resize(static_cast<std::size_t>(*hi));
    const std::uint64_t k = prefix.size();
    if (item.empty()) {
      if (lo > k)
        return fail(errc::invalid_argument,
                    "minItems exceeds prefixItems with items false at " + at(ptr));
      hi = k;
    }
    // The elements after the prefix: (min, max) more.
    std::uint64_t rest_lo = lo > k ? lo - k : 0;
    std::optional<std::uint64_t> rest_hi;
    if (hi) rest_hi = *hi - k;
    std::string body;
    if (k == 0) {
      if (hi && *hi == 0) return "\"[\" ws \"]\" ws";
      std::string more =
          repeat("( \",\" ws " + item + " )", rest_lo ? rest_lo - 1 : 0,
                 rest_hi ? std::optional<std::uint64_t>(*rest_hi - 1) : std::nullopt);
      body = item + (more.empty() ? "" : " " + more);
      if (rest_lo == 0) body = "( " + body + " )?";
    } else {
      body = repeat("( \",\" ws " + item + " )", rest_lo, rest_hi);
      for (std::uint64_t i = k; i-- > 0;) {
        std::string seq = (i ? "\",\" ws " : "") + prefix[i] + (body.empty() ? "" : " " + body);
        body = i >= lo ? "( " + seq + " )?" : seq;
      }
    }
    return "\"[\" ws " + body + " \"]\" ws";
  }

  // ---- strings -----------------------------------------------------------------------------

  std::string string(const Value& s, const std::string& ptr) {
    std::uint64_t lo = count(s, "minLength", ptr).value_or(0);
    std::optional<std::uint64_t> hi = count(s, "maxLength", ptr);
    const Value* pat = s.find("pattern");
    const Value* fmt = s.find("format");
    if (err_) return "ws";
    const bool lengths = s.find("minLength") || hi;
    if (pat && (fmt || lengths))
      return unsupported("pattern", ptr, "combined with format or a length");
    if (fmt && lengths) return unsupported("format", ptr, "combined with a length");
    prim("ws");
    if (pat) {
      if (!pat->is_string()) return unsupported("pattern", ptr, "not a string");
      auto e = regex_to_gbnf(pat->as_string(), RegexOptions{.json_string = true, .search = true});
      if (!e) {
        return fail(e.error().code, "pattern at " + at(ptr) + ": " + e.error().message);
      }
      return "\"\\\"\" " + *e + " \"\\\"\" ws";
    }
    if (fmt) {
      if (!fmt->is_string()) return unsupported("format", ptr, "not a string");
      std::string f = format_rule(fmt->as_string());
      if (f.empty()) return unsupported("format", ptr, "format \"" + fmt->as_string() + "\"");
      return "\"\\\"\" " + f + " \"\\\"\" ws";
    }
    if (hi && *hi < lo) return fail(errc::invalid_argument, "maxLength < minLength at " + at(ptr));
    if (!lengths) return prim("string");
    prim("char");
    return "\"\\\"\" " + repeat("char", lo, hi) + " \"\\\"\" ws";
  }

  const Value& root_;
  JsonSchemaOptions opt_;
  std::vector<std::pair<std::string, std::string>> rules_;
  std::map<std::string, std::string> by_body_;
  std::set<std::string> taken_, prims_;
  std::map<std::string, std::string> refs_;
  std::deque<Value> owned_;
  std::optional<error> err_;
  int depth_ = 0;
};

}  // namespace detail

/// A GBNF grammar (rule "root") whose sentences are JSON texts valid against `schema` (see the
/// file comment for the supported subset and approximations). Unsupported keywords are
/// errc::unsupported errors naming the keyword and its JSON pointer; malformed schemas
/// errc::invalid_argument.
inline result<std::string> json_schema_to_gbnf(const io::json::Value& schema,
                                               const JsonSchemaOptions& options = {}) {
  detail::SchemaCompiler c(schema, options);
  return c.run();
}

/// The same from schema text (a JSON document).
inline result<std::string> json_schema_to_gbnf(std::string_view schema_text,
                                               const JsonSchemaOptions& options = {}) {
  auto v = io::json::parse(schema_text, "json schema");
  if (!v) return v.error();
  return json_schema_to_gbnf(*v, options);
}

}  // namespace edgellm::constrain
